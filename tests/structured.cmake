# Output constraints (engine/constrain.c): the JSON-schema compiler through `fogline schema`,
# against npm ajv (a real JSON Schema validator) and JSON.parse: samples valid, valid texts
# accepted, broken ones rejected, on hand-written and 200 random schemas; every refused keyword
# by its one-line error.
add_test(NAME structured.schema COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/structured/schema.test.mjs)
set_tests_properties(structured.schema PROPERTIES LABELS integration TIMEOUT 600
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>")
