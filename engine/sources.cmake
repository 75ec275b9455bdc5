# The engine's sources, listed once for the two builds that make the fl_engine library: the
# top-level one (engine/CMakeLists.txt) and the GPU machine's own (tests/gpu/CMakeLists.txt,
# which cannot use the top-level build: that machine may lack the server's libraries).
file(GLOB FL_ENGINE_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c
     ${CMAKE_CURRENT_LIST_DIR}/tokenizer/*.c ${CMAKE_CURRENT_LIST_DIR}/cpu/*.c)
