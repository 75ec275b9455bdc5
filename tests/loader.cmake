# Model loading tests (engine/safetensors.c, config.c, model.c, server/cli/cmd_info.c), and
# quantized directories: unit.test_loader_quant (the loader, on models written in C) and
# unit.test_quantize (`fogline quantize` on the fixture's models, server/cli/cmd_quantize.c).
# The fixture writes random Hugging Face model directories with the PyTorch reference
# (tests/reference/make_random_model.py) into the build dir, plus expect.json files read back
# with st.py; the C tests compare the loader against them. ~2 s.
add_test(NAME loader.fixture.models
  COMMAND ${FL_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/data/loader/gen_models.py
          ${CMAKE_BINARY_DIR}/loader_models)
set_tests_properties(loader.fixture.models PROPERTIES
  FIXTURES_SETUP loader_models LABELS python
  ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
set_tests_properties(unit.test_loader unit.test_loader_bad unit.test_loader_info unit.test_loader_tok
  unit.test_quantize PROPERTIES FIXTURES_REQUIRED loader_models)
# fogline quantize's round trip also checks that the CUDA backend (fl_cuda.h) refuses its output
target_link_libraries(test_quantize PRIVATE fl_backends)
set_tests_properties(unit.test_loader_fuzz PROPERTIES TIMEOUT 120)
