# valgrind.serve (tests/valgrind/serve.test.mjs): a short `fogline serve` session under valgrind
# memcheck (chats with a Redis session, a cancel, a vanished client, OpenAI plain and streamed,
# garbage frames, SIGTERM): exit 0, no memcheck error, no definitely-lost block.
# Label "valgrind", not "integration": the ASan build (ctest -L 'unit|integration') cannot run
# under valgrind, and the test is not added there at all. Run it in the Release build:
#   ctest --test-dir build --output-on-failure -L valgrind
if(NOT FL_SANITIZE)
  find_program(FL_VALGRIND NAMES valgrind)
  if(NOT FL_VALGRIND)
    set(FL_VALGRIND valgrind) # the test then fails saying valgrind is missing
  endif()
  if(NOT FL_NODE)
    find_program(FL_NODE NAMES node nodejs)
  endif()
  add_test(NAME valgrind.serve
    COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/valgrind/serve.test.mjs)
  set_tests_properties(valgrind.serve PROPERTIES LABELS valgrind TIMEOUT 1200
    ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_SERVE_MODEL=${FL_SERVE_MODEL};FL_VALGRIND=${FL_VALGRIND};FL_VALGRIND_SUPP=${FL_TESTS_DIR}/valgrind/fogline.supp")
endif()
