# The training code (engine/train) and its tools, tested from tests/train: Python only, so these
# are labelled "python" and the sanitizer build (which runs "unit|integration") skips them.
set(FL_BUILTIN_MODEL ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
# The training objective's batched block diffusion (--noise dual, --all-turns) equals plain
# block-causal forwards of what the decoder sees, block by block.
add_test(NAME train.dual_batches
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/train/test_dual.py ${FL_BUILTIN_MODEL})
set_tests_properties(train.dual_batches PROPERTIES LABELS python TIMEOUT 300)
# train.py --procs: two processes' shares of a batch give the one-process gradient of the whole
# batch, and the same weights after the step
add_test(NAME train.procs
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/train/test_procs.py ${FL_BUILTIN_MODEL})
set_tests_properties(train.procs PROPERTIES LABELS python TIMEOUT 300)
# train.py --resume: a run stopped at a checkpoint and resumed ends bit-identical to the run in
# one go (one process and two); bad resumes stop with a one-line message
add_test(NAME train.resume
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/train/test_resume.py)
set_tests_properties(train.resume PROPERTIES LABELS python TIMEOUT 600)
# eval.py --json-out's per-dialogue results, gap.py (where threshold decoding loses to top-1)
# and pool_eval.py (samples pooled, paired interval): consistent with each other; bad inputs
add_test(NAME train.eval_tools
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/train/test_eval_tools.py ${FL_BUILTIN_MODEL})
set_tests_properties(train.eval_tools PROPERTIES LABELS python TIMEOUT 300)
