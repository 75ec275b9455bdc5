# The decoding engine on the real CPU backend with random models made by the reference script.
# Fast-dLLM v2 takes its mask token from the tokenizer; the random model has none, so the
# fixture names one in config.json (a key the loader accepts for every family).
add_test(NAME decode.random_models
  COMMAND sh -c "${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_random_model.py ${CMAKE_BINARY_DIR}/fixtures/dec_q3 --layout qwen3 --seed 11 && ${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_random_model.py ${CMAKE_BINARY_DIR}/fixtures/dec_q2 --layout qwen2 --seed 12 --tie && ${FL_PYTHON} -c \"import json;p='${CMAKE_BINARY_DIR}/fixtures/dec_q2/config.json';c=json.load(open(p));c['mask_token_id']=c['vocab_size']-1;json.dump(c,open(p,'w'),indent=2)\"")
set_tests_properties(decode.random_models PROPERTIES FIXTURES_SETUP decode_models LABELS python)
set_tests_properties(unit.test_sched PROPERTIES FIXTURES_REQUIRED decode_models)
add_test(NAME unit.test_sched_qwen2 COMMAND test_sched ${CMAKE_BINARY_DIR}/fixtures/dec_q2)
set_tests_properties(unit.test_sched_qwen2 PROPERTIES FIXTURES_REQUIRED decode_models LABELS "unit")
# the same with KV pages in bf16: overlap, batching and cached prefixes stay exact
add_test(NAME unit.test_sched_kvbf16 COMMAND test_sched ${CMAKE_BINARY_DIR}/fixtures/dec_q3 bf16)
set_tests_properties(unit.test_sched_kvbf16 PROPERTIES FIXTURES_REQUIRED decode_models LABELS "unit")
# greedy decoding token for token against tests/reference/ref_decode.py (no cache, no scheduler)
# an SDAR-MoE model (Qwen3-MoE keys and names; vocabulary shrunk, so its mask is a config key)
add_test(NAME decode.sdarmoe_model
  COMMAND sh -c "${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_moe_model.py ${CMAKE_BINARY_DIR}/fixtures/dec_sdarmoe --family sdar-moe --seed 45 --vocab 1024 && ${FL_PYTHON} -c \"import json;p='${CMAKE_BINARY_DIR}/fixtures/dec_sdarmoe/config.json';c=json.load(open(p));c['mask_token_id']=1023;json.dump(c,open(p,'w'),indent=2)\"")
set_tests_properties(decode.sdarmoe_model PROPERTIES FIXTURES_SETUP sdarmoe_dec_model LABELS python)
add_test(NAME decode.parity_reference
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/parity_decode.py $<TARGET_FILE:fogline>
          ${CMAKE_BINARY_DIR}/fixtures/dec_q3 ${CMAKE_BINARY_DIR}/fixtures/dec_q2
          ${CMAKE_BINARY_DIR}/fixtures/dec_sdarmoe)
set_tests_properties(decode.parity_reference PROPERTIES
  FIXTURES_REQUIRED "decode_models;sdarmoe_dec_model" LABELS "integration")
# log probabilities: the engine's trace replayed on the reference, each decided token's
# log-softmax and top alternatives from the forward that decided it (sampled, edited, shifted)
add_test(NAME decode.parity_logprobs
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/parity_logprobs.py $<TARGET_FILE:fogline>
          ${CMAKE_BINARY_DIR}/fixtures/dec_q3 ${CMAKE_BINARY_DIR}/fixtures/dec_q2
          ${CMAKE_BINARY_DIR}/fixtures/edit_model ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
set_tests_properties(decode.parity_logprobs PROPERTIES
  FIXTURES_REQUIRED "decode_models;edit_model" LABELS "integration" TIMEOUT 900)
# LLaDA2's rules token for token against ref_decode.py: LLaDA2.0's threshold with the authors'
# quota schedule, LLaDA2.1's token editing and post steps (edits, post steps and forwards
# counted against the reference's loop, with and without decode-store overlap), on sharpened
# copies of the dense random model at its block and at block 32. LLaDA2-format directories
# (make_moe_model.py) go on the same command line when the loader has them.
# A LLaDA2-format MoE model (make_moe_model.py: the real keys and tensor names) with its
# vocabulary shrunk to 2048 so that the reference's whole-sequence forwards stay quick; its mask
# and end ids are config keys then (the real ids are the tokenizer's, which server.llada2 uses).
add_test(NAME decode.llada2_model
  COMMAND sh -c "${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_moe_model.py ${CMAKE_BINARY_DIR}/fixtures/dec_llada2 --family llada2 --seed 44 --vocab 2048 && ${FL_PYTHON} -c \"import json;p='${CMAKE_BINARY_DIR}/fixtures/dec_llada2/config.json';c=json.load(open(p));c['mask_token_id']=2047;c['eos_token_id']=2046;json.dump(c,open(p,'w'),indent=2)\"")
set_tests_properties(decode.llada2_model PROPERTIES FIXTURES_SETUP llada2_dec_model LABELS python)
add_test(NAME decode.parity_llada2
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/parity_llada2.py $<TARGET_FILE:fogline>
          ${CMAKE_BINARY_DIR}/fixtures/dec_q3 ${CMAKE_BINARY_DIR}/fixtures/dec_llada2)
set_tests_properties(decode.parity_llada2 PROPERTIES
  FIXTURES_REQUIRED "decode_models;llada2_dec_model" LABELS "integration" TIMEOUT 1800)
# The built-in model: prompt ids (template + tokenizer) and greedy one-token-per-step replies
# equal to the training-side reference decoder (engine/train/eval.py --greedy-out).
add_test(NAME decode.parity_default_model
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/parity_default_model.py $<TARGET_FILE:fogline>
          ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk ${FL_TESTS_DIR}/data/helpdesk_greedy.json)
set_tests_properties(decode.parity_default_model PROPERTIES LABELS "integration")
# generate on the built-in model: stop strings, seeded sampling, top-k/top-p, bad flags
add_test(NAME decode.generate_cli
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/test_generate_cli.py $<TARGET_FILE:fogline>
          ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
set_tests_properties(decode.generate_cli PROPERTIES LABELS "integration")
# generate --json --trace (every step's draft) and --visual in a real terminal (tmux)
add_test(NAME decode.generate_steps
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/test_generate_steps.py $<TARGET_FILE:fogline>
          ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
set_tests_properties(decode.generate_steps PROPERTIES LABELS "integration" TIMEOUT 300)
# bench parallel / bench decode: a short --repeat run and their bad flags
add_test(NAME decode.bench_cli
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/test_bench_cli.py $<TARGET_FILE:fogline>
          ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
set_tests_properties(decode.bench_cli PROPERTIES LABELS "integration" TIMEOUT 300)
