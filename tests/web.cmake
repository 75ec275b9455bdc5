# The browser chat UI (web/) in a real headless Chromium: Debian's /usr/bin/chromium (tests/setup.sh
# installs it; FL_CHROMIUM overrides) driven by npm playwright-core from tests/node, against a
# real `fogline serve` with FL_SERVE_MODEL (see server.cmake). "integration", so the ASan build
# runs it too. Screenshots go to tests/artifacts/web/ (git-ignored).
#   web.ui   masked placeholders resolve into the committed reply, stop, reload/resume,
#            server errors and disconnects shown, reconnect keeps the session; a thinking
#            model's reasoning collapsed (server.cmake's think_model fixture); decoding settings
#            start at the server's (hello) and a chat carries only the user's changes; with token
#            editing (server.cmake's edit_model fixture) an edited token flickers back into focus
if(NOT FL_NODE)
  find_program(FL_NODE NAMES node nodejs)
  if(NOT FL_NODE)
    set(FL_NODE node)
  endif()
endif()
if(NOT FL_SERVE_MODEL)
  set(FL_SERVE_MODEL "${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk")
endif()
add_test(NAME web.ui COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/web/ui.test.mjs)
set_tests_properties(web.ui PROPERTIES LABELS integration TIMEOUT 1200
  FIXTURES_REQUIRED "think_model;edit_model"
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_SERVE_MODEL=${FL_SERVE_MODEL};FL_THINK_MODEL=${CMAKE_BINARY_DIR}/fixtures/think_model;FL_EDIT_MODEL=${CMAKE_BINARY_DIR}/fixtures/edit_model")
