# Output constraints (engine/constrain.c): the JSON-schema compiler through `fogline schema`,
# against npm ajv (a real JSON Schema validator) and JSON.parse: samples valid, valid texts
# accepted, broken ones rejected, on hand-written and 200 random schemas; every refused keyword
# by its one-line error.
add_test(NAME structured.schema COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/structured/schema.test.mjs)
set_tests_properties(structured.schema PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>")
# String and number constraints (pattern, format, minLength/maxLength, minimum/maximum/
# exclusive*/multipleOf) through `fogline schema`, against npm ajv with ajv-formats (full mode):
# exact agreement on hand-written and 150 random patterns, lengths in code points and numbers
# around the bounds; formats a sound subset that takes their documented forms; refused
# patterns and keyword misuse by their one-line errors.
add_test(NAME structured.constraints COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/structured/constraints.test.mjs)
set_tests_properties(structured.constraints PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>")
# Constrained denoising end to end: random tiny models of each layout (SDAR, Fast-dLLM v2 with
# the built-in tokenizer; LLaDA2 MoE with its stand-in tokenizer) answer random schemas x
# prompts, tight and loose max_tokens, greedy and sampled, over the openai client and the
# WebSocket; every reply valid for npm ajv
set(FL_STRUCT_MODELS ${CMAKE_BINARY_DIR}/fixtures/struct_models)
add_test(NAME structured.models
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/structured/make_models.py ${FL_STRUCT_MODELS}
          --tokenizer ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
set_tests_properties(structured.models PROPERTIES FIXTURES_SETUP struct_models LABELS python)
add_test(NAME structured.decode COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/structured/decode.test.mjs)
if(FL_SANITIZE)
  set(FL_STRUCT_SCHEMAS 16)
else()
  set(FL_STRUCT_SCHEMAS 60)
endif()
set_tests_properties(structured.decode PROPERTIES LABELS integration TIMEOUT 900
  FIXTURES_REQUIRED "struct_models;llada2_model"
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_STRUCT_MODELS=${FL_STRUCT_MODELS};FL_LLADA2_MODEL=${CMAKE_BINARY_DIR}/fixtures/llada2_model;FL_STRUCT_SCHEMAS=${FL_STRUCT_SCHEMAS}")
# Tool calls: the official openai client against fogline serve on Qwen3's real template (the
# think model) and LLaDA2's Ling template: required/named calls valid for ajv, streamed and
# not, the round trip's prompt as @huggingface/jinja renders it, bad inputs, the WebSocket
add_test(NAME structured.tools COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/structured/tools.test.mjs)
set_tests_properties(structured.tools PROPERTIES LABELS integration TIMEOUT 3600
  FIXTURES_REQUIRED "think_model;llada2_model"
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_THINK_MODEL=${CMAKE_BINARY_DIR}/fixtures/think_model;FL_LLADA2_MODEL=${CMAKE_BINARY_DIR}/fixtures/llada2_model;FL_SERVE_MODEL=${FL_SERVE_MODEL}")
