# The decoding engine on the real CPU backend with random models made by the reference script.
add_test(NAME decode.random_models
  COMMAND sh -c "${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_random_model.py ${CMAKE_BINARY_DIR}/fixtures/dec_q3 --layout qwen3 --seed 11 && ${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_random_model.py ${CMAKE_BINARY_DIR}/fixtures/dec_q2 --layout qwen2 --seed 12 --tie")
set_tests_properties(decode.random_models PROPERTIES FIXTURES_SETUP decode_models LABELS "unit")
set_tests_properties(unit.test_sched PROPERTIES
  FIXTURES_REQUIRED decode_models)
add_test(NAME unit.test_sched_qwen2 COMMAND test_sched ${CMAKE_BINARY_DIR}/fixtures/dec_q2)
set_tests_properties(unit.test_sched_qwen2 PROPERTIES FIXTURES_REQUIRED decode_models LABELS "unit")
