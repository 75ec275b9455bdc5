# libFuzzer targets (tests/fuzz/, docs/fuzzing.md). Built only with clang: option FL_FUZZ is
# on by default when the C compiler is Clang and off otherwise, so the gcc builds (build/,
# build-asan/) never see them. tests/fuzz/run_ci.sh makes a clang build in build-fuzz and runs
# `ctest -L fuzz`: each fuzz.<target> test runs its target over the corpus for 15 s.
#
# The engine and server sources the targets need are compiled again here, into fl_fuzz_engine,
# with coverage instrumentation and ASan+UBSan (fl_engine itself stays as its build made it).
if(NOT DEFINED FL_FUZZ)
  set(FL_FUZZ_IMPLICIT TRUE)
endif()
if(CMAKE_C_COMPILER_ID STREQUAL "Clang")
  option(FL_FUZZ "Build the libFuzzer targets (clang only)" ON)
else()
  option(FL_FUZZ "Build the libFuzzer targets (clang only)" OFF)
endif()

if(FL_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FL_FUZZ needs clang (libFuzzer); configure with CC=clang")
  endif()
  # libFuzzer's runtime comes in a separate package on Debian (libclang-rt-NN-dev)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer")
  check_c_source_compiles("#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(d && n) * 0; }"
    FL_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT FL_HAVE_LIBFUZZER)
    if(FL_FUZZ_IMPLICIT)
      message(WARNING "clang cannot link -fsanitize=fuzzer (install libclang-rt-dev); the fuzz "
                      "targets are not built")
      set(FL_FUZZ OFF)
    else()
      message(FATAL_ERROR "FL_FUZZ=ON but clang cannot link -fsanitize=fuzzer (install "
                          "libclang-rt-dev)")
    endif()
  endif()
endif()

if(FL_FUZZ)
  set(FL_FUZZ_DIR ${FL_TESTS_DIR}/fuzz)
  set(FL_FUZZ_CFLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                     -fno-omit-frame-pointer -g)
  # just what the targets call: tokenizer, loader (model binding, quantized formats), blob
  # codec, request parsing, response constraints
  file(GLOB FL_FUZZ_TOK_SRC CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/engine/tokenizer/*.c)
  add_library(fl_fuzz_engine STATIC ${FL_FUZZ_TOK_SRC}
    ${PROJECT_SOURCE_DIR}/engine/util.c ${PROJECT_SOURCE_DIR}/engine/safetensors.c ${PROJECT_SOURCE_DIR}/engine/config.c
    ${PROJECT_SOURCE_DIR}/engine/model.c ${PROJECT_SOURCE_DIR}/engine/qformat.c
    ${PROJECT_SOURCE_DIR}/engine/persist.c ${PROJECT_SOURCE_DIR}/engine/decode.c
    ${PROJECT_SOURCE_DIR}/engine/constrain.c ${PROJECT_SOURCE_DIR}/engine/cpauto.c ${PROJECT_SOURCE_DIR}/engine/cdecode.c
    ${PROJECT_SOURCE_DIR}/server/serve_proto.c ${PROJECT_SOURCE_DIR}/server/serve_responses.c
    ${FL_FUZZ_DIR}/fuzz_common.c ${FL_FUZZ_DIR}/fuzz_chat_common.c)
  target_include_directories(fl_fuzz_engine PUBLIC ${PROJECT_SOURCE_DIR}/engine
                             ${PROJECT_SOURCE_DIR}/server ${FL_FUZZ_DIR})
  target_compile_options(fl_fuzz_engine PUBLIC ${FL_FUZZ_CFLAGS})
  target_compile_definitions(fl_fuzz_engine PUBLIC
    FL_FUZZ_MODEL_DIR="${PROJECT_SOURCE_DIR}/engine/models/fogline-helpdesk")
  target_link_libraries(fl_fuzz_engine PUBLIC PkgConfig::JANSSON PkgConfig::PCRE2
                        PkgConfig::UTF8PROC Threads::Threads m)

  # the blob format is persist.c's and may change: its valid seeds are written at test time
  add_executable(fuzz_blob_seed ${FL_FUZZ_DIR}/blob_seed.c)
  target_link_libraries(fuzz_blob_seed PRIVATE fl_fuzz_engine)
  target_link_options(fuzz_blob_seed PRIVATE -fsanitize=address,undefined)

  # fuzz_qmodel's seeds come from the loader tests' tiny-model writer (tests/unit's kit), run
  # at test time like the blob seeds (corpus/qmodel holds committed copies of the quantized ones)
  add_executable(fuzz_qmodel_seed ${FL_FUZZ_DIR}/qmodel_seed.c)
  target_link_libraries(fuzz_qmodel_seed PRIVATE fl_fuzz_engine)
  target_include_directories(fuzz_qmodel_seed PRIVATE ${FL_TESTS_DIR}/unit)
  target_link_options(fuzz_qmodel_seed PRIVATE -fsanitize=address,undefined)

  # libFuzzer dictionaries (tests/fuzz/dict): the JSON keys and tokens a mutation rarely guesses
  function(fl_fuzz_dict target out)
    set(d "")
    if(target MATCHES "^chat_(ws|openai)$")
      set(d chat)
    elseif(target MATCHES "^(tokenize|chat_template)$")
      set(d text)
    elseif(target MATCHES "^(config|safetensors|generate|schema|regex)$")
      set(d ${target})
    elseif(target STREQUAL "qmodel")
      set(d safetensors)
    endif()
    set(${out} "" PARENT_SCOPE)
    if(d)
      set(${out} "-dict=${FL_FUZZ_DIR}/dict/${d}.dict" PARENT_SCOPE)
    endif()
  endfunction()

  set(FL_FUZZ_TARGETS chat_ws chat_openai tokenize detok chat_template safetensors config blob
                      generate qmodel schema regex)
  add_custom_target(fuzz_all)
  add_dependencies(fuzz_all fuzz_blob_seed fuzz_qmodel_seed)
  foreach(t ${FL_FUZZ_TARGETS})
    add_executable(fuzz_${t} ${FL_FUZZ_DIR}/fuzz_${t}.c)
    target_link_libraries(fuzz_${t} PRIVATE fl_fuzz_engine)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
    add_dependencies(fuzz_all fuzz_${t})
    fl_fuzz_dict(${t} dict)

    # the committed seeds are read, never written: new inputs go to the build dir's corpus
    set(work ${CMAKE_BINARY_DIR}/fuzz/corpus/${t})
    set(art ${CMAKE_BINARY_DIR}/fuzz/artifacts/${t})
    set(pre "mkdir -p ${work} ${art}")
    if(t STREQUAL "blob")
      set(pre "${pre} && $<TARGET_FILE:fuzz_blob_seed> ${work}")
    elseif(t STREQUAL "qmodel")
      set(pre "${pre} && $<TARGET_FILE:fuzz_qmodel_seed> ${work}")
    endif()
    add_test(NAME fuzz.${t}
      COMMAND sh -c "${pre} && exec $<TARGET_FILE:fuzz_${t}> -max_total_time=15 -timeout=10 -print_final_stats=1 ${dict} -artifact_prefix=${art}/ ${work} ${FL_FUZZ_DIR}/corpus/${t}")
    set_tests_properties(fuzz.${t} PROPERTIES LABELS fuzz TIMEOUT 120
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1")
  endforeach()
  target_include_directories(fuzz_qmodel PRIVATE ${FL_TESTS_DIR}/unit)
  # POST /generate's parser is in its own file (its answer path's engine calls are stubbed)
  target_sources(fuzz_generate PRIVATE ${PROJECT_SOURCE_DIR}/server/serve_generate.c)
endif()
