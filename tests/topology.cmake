# The deployed topology without Docker (tests/topology, docs/deploy.md): a real redis-server,
# two `fogline serve` replicas and Debian's nginx running docker/nginx/fogline.conf (the file
# the Compose demo mounts), driven by the npm ws and openai clients from tests/node.
#   topology.proxy     WebSocket and SSE streaming through nginx, both replicas used, routes
#   topology.sessions  a session started on one replica continues on the other (Redis), and
#                      survives SIGKILL of its replica mid-reply (reconnect through nginx)
# "integration", so the ASan build runs them too: each replica must exit 0 after SIGTERM.
# Needs nginx and redis-server (tests/setup.sh installs both); FL_NGINX / FL_REDIS_SERVER
# override their paths.
if(NOT FL_NODE)
  find_program(FL_NODE NAMES node nodejs)
  if(NOT FL_NODE)
    set(FL_NODE node)
  endif()
endif()
if(NOT FL_SERVE_MODEL)
  set(FL_SERVE_MODEL "${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk")
endif()
foreach(suite proxy sessions)
  add_test(NAME topology.${suite}
    COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/topology/${suite}.test.mjs)
  set_tests_properties(topology.${suite} PROPERTIES LABELS integration TIMEOUT 300
    ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_SERVE_MODEL=${FL_SERVE_MODEL}")
endforeach()
