# Forward pass tests (engine/cpu/cpu_backend.c, kernels.c, threadpool.c) and the forward
# benchmark.
# The fixture writes random models of both layouts and the PyTorch reference's logits, K/V and
# top-1 statistics (tests/reference/parity_forward.py) into the build dir; unit.test_forward
# runs the C forward over them in several schedules and backend variants. ~5 s.
add_test(NAME forward.fixture.ref
  COMMAND ${FL_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/parity_forward.py
          ${CMAKE_BINARY_DIR}/forward_ref)
set_tests_properties(forward.fixture.ref PROPERTIES
  FIXTURES_SETUP forward_ref LABELS python
  ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
set_tests_properties(unit.test_forward PROPERTIES FIXTURES_REQUIRED forward_ref)

# Mixture-of-experts models (LLaDA2, SDAR-MoE): the reference's logits, routes and route
# weights (tests/reference/parity_forward_moe.py, written from the authors' modeling code);
# unit.test_forward_moe compares routing, logits, schedules and batching in several variants.
add_test(NAME forward.fixture.moe
  COMMAND ${FL_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/parity_forward_moe.py
          ${CMAKE_BINARY_DIR}/forward_moe_ref)
set_tests_properties(forward.fixture.moe PROPERTIES
  FIXTURES_SETUP forward_moe_ref LABELS python
  ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
set_tests_properties(unit.test_forward_moe PROPERTIES FIXTURES_REQUIRED forward_moe_ref)

# The same checks on the larger "small" shape and more seeds and layouts (slower).
add_test(NAME parity.forward.fixture
  COMMAND ${FL_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/parity_forward.py
          ${CMAKE_BINARY_DIR}/forward_ref_full --full)
set_tests_properties(parity.forward.fixture PROPERTIES
  FIXTURES_SETUP forward_ref_full LABELS python
  ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
add_test(NAME parity.forward COMMAND test_forward ${CMAKE_BINARY_DIR}/forward_ref_full)
set_tests_properties(parity.forward PROPERTIES
  FIXTURES_REQUIRED forward_ref_full LABELS parity TIMEOUT 300
  ENVIRONMENT "FL_TESTS_DIR=${FL_TESTS_DIR};FL_BUILD_DIR=${CMAKE_BINARY_DIR}")

# The benchmark's whole path (our forward, the reference subprocess, sgemm and bandwidth
# probes, the probes around each timed step with their range) on a tiny model: it must run
# and print its table. Timings here mean nothing.
add_test(NAME bench.forward.smoke
  COMMAND fogline bench forward --model ${CMAKE_BINARY_DIR}/forward_ref/q3_f32 --ctx 16
          --blocks 4,8 --steps 2 --threads 2 --kv-format f32,bf16
          --ref-script ${CMAKE_CURRENT_SOURCE_DIR}/reference/bench_forward.py)
set_tests_properties(bench.forward.smoke PROPERTIES
  FIXTURES_REQUIRED forward_ref LABELS bench TIMEOUT 300
  PASS_REGULAR_EXPRESSION "floor ms +ms/floor\n +4 +f32 +f32 +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ [(][0-9]+-[0-9]+[)] +[0-9.]+ +[0-9.]+x\n")
# --masked M below the block: the step asking only the masks' outputs, beside the one asking all
add_test(NAME bench.forward.masked
  COMMAND fogline bench forward --model ${CMAKE_BINARY_DIR}/forward_ref/q3_f32 --ctx 16
          --blocks 4,8 --steps 2 --threads 2 --masked 3 --no-ref)
set_tests_properties(bench.forward.masked PROPERTIES
  FIXTURES_REQUIRED forward_ref LABELS bench TIMEOUT 300
  PASS_REGULAR_EXPRESSION "masks' rows ms +ratio\n +4 +f32 +f32 +[0-9.]+ +[0-9.]+ +[0-9.]+x\n +8 ")
# --simd: each kernel level timed in one run, each labelled in the tables (on a CPU without
# AMX or AVX-512 the caps fall back and the rows are still both there); a level it does not
# know is a one-line error
add_test(NAME bench.forward.simd
  COMMAND fogline bench forward --model ${CMAKE_BINARY_DIR}/forward_ref/q3_f32 --ctx 16
          --blocks 16 --steps 2 --threads 2 --weights q8 --simd auto,avx512 --no-ref)
set_tests_properties(bench.forward.simd PROPERTIES
  FIXTURES_REQUIRED forward_ref LABELS bench TIMEOUT 300
  PASS_REGULAR_EXPRESSION "ms/floor\n +16 +q8 auto +f32 [^\n]+\n +16 +q8 avx512 +f32 [^\n]+\n")
add_test(NAME bench.forward.bad_simd
  COMMAND fogline bench forward --model ${CMAKE_BINARY_DIR}/forward_ref/q3_f32 --simd auto,avx3)
set_tests_properties(bench.forward.bad_simd PROPERTIES LABELS bench
  PASS_REGULAR_EXPRESSION "^fogline bench forward: --simd: unknown level 'avx3' [(]auto, avx512, avx2, plain[)]\n$")
