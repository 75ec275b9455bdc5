# The fogline binary's sources (server/, cli/, bench/) and its built-in paths, listed once for
# the two builds that make it: the top-level one (server/CMakeLists.txt) and the GPU machine's
# own (tests/gpu/CMakeLists.txt, which finds the libraries its own way).
file(GLOB FL_SERVER_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c
     ${CMAKE_CURRENT_LIST_DIR}/cli/*.c ${CMAKE_CURRENT_LIST_DIR}/bench/*.c)
# backend choice is a library of its own (fl_backends)
list(REMOVE_ITEM FL_SERVER_SRC ${CMAKE_CURRENT_LIST_DIR}/backend_select.c)
get_filename_component(FL_SERVER_ROOT ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
# the version is the top-level project's
file(STRINGS ${FL_SERVER_ROOT}/CMakeLists.txt FL_SERVER_PROJECT REGEX "^project\\(fogline VERSION ")
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" FL_SERVER_VERSION "${FL_SERVER_PROJECT}")
# The built-in model, web UI and benchmark prompts: files of this checkout.
function(fl_server_paths target)
  target_compile_definitions(${target} PRIVATE FL_VERSION="${FL_SERVER_VERSION}"
    FL_DEFAULT_MODEL_DIR="${FL_SERVER_ROOT}/engine/models/fogline-helpdesk"
    FL_DEFAULT_WEB_DIR="${FL_SERVER_ROOT}/web"
    FL_DEFAULT_BENCH_PROMPTS="${FL_SERVER_ROOT}/tests/data/helpdesk_heldout.json"
    FL_DEFAULT_BENCH_MULTI="${FL_SERVER_ROOT}/tests/data/helpdesk_multi_heldout.json")
endfunction()
