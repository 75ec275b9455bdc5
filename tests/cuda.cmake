# The CUDA backend's tests (cuda/, docs/cuda.md). unit.test_cuda_select (tests/unit) runs in
# every build. The programs of tests/gpu are built whenever the CUDA backend is: gpu.parity
# (label gpu) exits 77, which ctest reports as skipped, where no GPU is usable (CI, this
# machine); gpu.parity.selftest runs the same checks with a second CPU backend in place of
# the GPU, so that the checks themselves are tested everywhere; gpu.script builds the GPU
# machine's own build (without CUDA) and runs its serve stage on the CPU. On a GPU machine
# tests/gpu/run.sh is the whole story (build, parity, server, benchmark, PyTorch baseline).
# the small models of the parity tests (plain C: the emulated GPU below uses them too)
add_executable(gpu_make_model ${FL_TESTS_DIR}/gpu/make_model.c)
target_link_libraries(gpu_make_model PRIVATE m)
set(FL_GPU_MODELS ${CMAKE_BINARY_DIR}/fixtures/gpu)
set(FL_GPU_MODEL_DIRS "")
foreach(spec "q3-tiny;--layout;qwen3;--shape;tiny;--seed;1"
             "q2-tiny-tied;--layout;qwen2;--shape;tiny;--tie;--seed;2"
             "q3-small-f32;--layout;qwen3;--shape;small;--dtype;f32;--seed;3")
  list(GET spec 0 name)
  list(SUBLIST spec 1 -1 args)
  add_test(NAME gpu.fixture.${name} COMMAND gpu_make_model ${FL_GPU_MODELS}/${name} ${args})
  set_tests_properties(gpu.fixture.${name} PROPERTIES FIXTURES_SETUP gpu_models LABELS gpu)
  list(APPEND FL_GPU_MODEL_DIRS ${FL_GPU_MODELS}/${name})
endforeach()
if(FL_CUDA_BUILT)
  foreach(t gpu_parity gpu_bench gpu_batch)
    add_executable(${t} ${FL_TESTS_DIR}/gpu/${t}.c)
    target_link_libraries(${t} PRIVATE fl_backends Threads::Threads)
  endforeach()
  # built here so that warnings are errors for it too; run by tests/gpu/run.sh
  add_executable(gpu_sched ${FL_TESTS_DIR}/gpu/gpu_sched.c
                 ${CMAKE_SOURCE_DIR}/server/bench/bench_common.c)
  target_include_directories(gpu_sched PRIVATE ${CMAKE_SOURCE_DIR}/server/bench)
  target_link_libraries(gpu_sched PRIVATE fl_backends Threads::Threads)
  add_test(NAME gpu.parity COMMAND gpu_parity ${FL_GPU_MODEL_DIRS})
  set_tests_properties(gpu.parity PROPERTIES FIXTURES_REQUIRED gpu_models LABELS gpu
                       SKIP_RETURN_CODE 77 TIMEOUT 600)
  add_test(NAME gpu.parity.selftest COMMAND gpu_parity --self-test ${FL_GPU_MODEL_DIRS})
  set_tests_properties(gpu.parity.selftest PROPERTIES FIXTURES_REQUIRED gpu_models LABELS gpu
                       TIMEOUT 300)
  # q8 weights on the GPU (weight-only), within the CPU q8's limits; the self-test's stand-in
  # is the CPU's own q8 (activations quantized too)
  add_test(NAME gpu.parity.q8 COMMAND gpu_parity --q8 ${FL_GPU_MODEL_DIRS})
  set_tests_properties(gpu.parity.q8 PROPERTIES FIXTURES_REQUIRED gpu_models LABELS gpu
                       SKIP_RETURN_CODE 77 TIMEOUT 600)
  add_test(NAME gpu.parity.q8.selftest COMMAND gpu_parity --self-test --q8 ${FL_GPU_MODEL_DIRS})
  set_tests_properties(gpu.parity.q8.selftest PROPERTIES FIXTURES_REQUIRED gpu_models LABELS gpu
                       TIMEOUT 300)
  # mixture-of-experts models (decode.cmake's LLaDA2 and SDAR-MoE fixtures) with FL_CUDA_MOE=1:
  # the GPU takes the CPU's routes for each compared batch (fl_cuda_force_routes)
  set(FL_MOE_DIRS ${CMAKE_BINARY_DIR}/fixtures/dec_llada2 ${CMAKE_BINARY_DIR}/fixtures/dec_sdarmoe)
  add_test(NAME gpu.parity.moe COMMAND gpu_parity ${FL_MOE_DIRS})
  set_tests_properties(gpu.parity.moe PROPERTIES
                       FIXTURES_REQUIRED "llada2_dec_model;sdarmoe_dec_model" LABELS gpu
                       SKIP_RETURN_CODE 77 TIMEOUT 600 ENVIRONMENT FL_CUDA_MOE=1)
  add_test(NAME gpu.parity.moe.selftest COMMAND gpu_parity --self-test ${FL_MOE_DIRS})
  set_tests_properties(gpu.parity.moe.selftest PROPERTIES
                       FIXTURES_REQUIRED "llada2_dec_model;sdarmoe_dec_model" LABELS gpu
                       TIMEOUT 300)
  # the big-batch throughput program on the CPU: every sequence of every concurrency finishes
  add_test(NAME gpu.batch.cpu COMMAND gpu_batch --model ${FL_GPU_MODELS}/q3-tiny --device cpu
           --conc 1,6 --prompt 37 --max-tokens 21)
  set_tests_properties(gpu.batch.cpu PROPERTIES FIXTURES_REQUIRED gpu_models LABELS gpu TIMEOUT 300)
endif()
# Label gpu: the Release run only (the sanitizer build would build the same again).
add_test(NAME gpu.script COMMAND bash ${FL_TESTS_DIR}/gpu/build_check.sh ${CMAKE_BINARY_DIR}/gpu-script)
set_tests_properties(gpu.script PROPERTIES LABELS gpu TIMEOUT 900)
# CUDA kernels' logic on the CPU, through tests/unit/cuda_emu.hh: every build, with or without
# nvcc (no CUDA header is involved): the few-row attention (cuda/attn_few.cuh) and the
# tensor-core streaming matmul (cuda/mv_tc.cuh, mma.sync emulated by its PTX layout) and the
# tensor-core GEMM for many rows, dense q8 and the experts grouped (cuda/gemm_tc.cuh), and a
# MoE layer's router (cuda/router.cuh), its routing (cuda/route.cuh, against engine/moe.c) and
# its assignments in expert order (cuda/moe_assign.cuh)
foreach(t test_attn_few_emu test_mv_tc_emu test_gemm_tc_emu test_router_emu
    test_moe_assign_emu test_route_emu)
  add_executable(${t} ${FL_TESTS_DIR}/unit/${t}.cc)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/cuda ${FL_TESTS_DIR}/unit)
  target_compile_options(${t} PRIVATE -Wno-unknown-pragmas)
  target_link_libraries(${t} PRIVATE Threads::Threads)
  add_test(NAME unit.${t} COMMAND ${t})
  # a block's threads are fibers on one OS thread (a barrier no thread can pass aborts at
  # once); 300 s is a guard for the sanitizer build on a loaded machine
  set_tests_properties(unit.${t} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()
# the device's routing is compared with the engine's own fl_moe_route
target_include_directories(test_route_emu PRIVATE ${CMAKE_SOURCE_DIR}/engine)
target_link_libraries(test_route_emu PRIVATE fl_engine)
# the batch shapes and graph cache of the CUDA backend (cuda/flc_shape.h), plain C
target_include_directories(test_flc_shape PRIVATE ${CMAKE_SOURCE_DIR}/cuda)
# unit.test_cuda_select also checks a mixture-of-experts model (FL_CUDA_MOE)
set_tests_properties(unit.test_cuda_select PROPERTIES FIXTURES_REQUIRED llada2_dec_model)
# The CUDA backend itself on the CPU (tests/cuda_emu/README.md): cuda/cuda_backend.cu and
# cuda/cuda_kernels.cu compiled as C++ against an emulated CUDA runtime and cuBLAS, every
# build, with or without nvcc; gpu_parity_emu is tests/gpu/gpu_parity.c linked with it, so the
# checks a GPU runs (tests/gpu/run.sh) run here on the host code and kernels as written
add_library(fl_cuda_emu STATIC ${FL_TESTS_DIR}/cuda_emu/runtime.cc
            ${FL_TESTS_DIR}/cuda_emu/kernels.cc ${FL_TESTS_DIR}/cuda_emu/backend.cc)
target_include_directories(fl_cuda_emu PRIVATE ${FL_TESTS_DIR}/cuda_emu/include
                           ${FL_TESTS_DIR}/unit)
target_include_directories(fl_cuda_emu PUBLIC ${CMAKE_SOURCE_DIR}/cuda)
target_compile_definitions(fl_cuda_emu PRIVATE FL_CUDA_EMU FL_CUBLAS_DIR="" FL_CUDA_ARCHS="90")
# the nvcc build's own flags for these files (cuda/CMakeLists.txt): no -Wshadow; its host pass
# does not see the format truncation g++ finds in a description it cuts on purpose; device
# code reads memory through other types (16-byte loads of bf16), which nvcc allows and g++'s
# strict aliasing would not
target_compile_options(fl_cuda_emu PRIVATE -Wno-unknown-pragmas -Wno-shadow
                       -Wno-format-truncation -fno-strict-aliasing)
target_link_libraries(fl_cuda_emu PUBLIC fl_engine Threads::Threads PRIVATE PkgConfig::OPENBLAS)
add_library(fl_backends_emu STATIC ${CMAKE_SOURCE_DIR}/server/backend_select.c)
target_include_directories(fl_backends_emu PUBLIC ${CMAKE_SOURCE_DIR}/server)
target_link_libraries(fl_backends_emu PUBLIC fl_engine fl_cuda_emu)
add_executable(gpu_parity_emu ${FL_TESTS_DIR}/gpu/gpu_parity.c)
target_link_libraries(gpu_parity_emu PRIVATE fl_backends_emu Threads::Threads)
# The emulated GPU's runs. A variant costs about 7 s on a dense model and 40-80 s on a MoE one
# in release (each CUDA thread is emulated), several times that under ASan. Label unit (so
# under ASan+UBSan too): a dense model in the streaming, tensor-core attention, tensor-core
# matmul and programmatic-launch variants, eager and graphs; a MoE model with graphs; the
# emulation's own test. Label integration: the server (tests/gpu/serve.sh: WebSocket chat,
# OpenAI client, load, Redis, metrics, SIGTERM). Label gpu (release only): every variant of
# another dense model, q8, the MoE variants (tensor-core matmul, grouped GEMM, programmatic
# launch), SDAR-MoE, q8 experts, and tests/gpu/run.sh itself (gpu.rehearsal, below).
add_test(NAME unit.cuda_emu.parity COMMAND gpu_parity_emu --variant 0,1,4,5,8,9,10,11
         ${FL_GPU_MODELS}/q3-tiny)
set_tests_properties(unit.cuda_emu.parity PROPERTIES FIXTURES_REQUIRED gpu_models LABELS unit
                     TIMEOUT 1500)
add_test(NAME unit.cuda_emu.parity.moe COMMAND gpu_parity_emu --variant 1
         ${CMAKE_BINARY_DIR}/fixtures/dec_llada2)
set_tests_properties(unit.cuda_emu.parity.moe PROPERTIES FIXTURES_REQUIRED llada2_dec_model
                     LABELS unit TIMEOUT 1500 ENVIRONMENT FL_CUDA_MOE=1)
add_test(NAME integration.cuda_emu.serve COMMAND bash ${FL_TESTS_DIR}/gpu/serve.sh
         $<TARGET_FILE:fogline_emu> cuda "" 2 4)
set_tests_properties(integration.cuda_emu.serve PROPERTIES LABELS integration TIMEOUT 900
                     SKIP_RETURN_CODE 77 ENVIRONMENT FL_CUDA_EMU_MEM_MB=1024)
add_test(NAME gpu.cuda_emu.parity COMMAND gpu_parity_emu ${FL_GPU_MODELS}/q2-tiny-tied)
add_test(NAME gpu.cuda_emu.parity.q8 COMMAND gpu_parity_emu --q8 --variant 0,1,8,9,14,15
         ${FL_GPU_MODELS}/q3-tiny)
set_tests_properties(gpu.cuda_emu.parity gpu.cuda_emu.parity.q8 PROPERTIES
                     FIXTURES_REQUIRED gpu_models LABELS gpu TIMEOUT 1500)
add_test(NAME gpu.cuda_emu.parity.moe COMMAND gpu_parity_emu --variant 9,17,19,21
         ${CMAKE_BINARY_DIR}/fixtures/dec_llada2)
add_test(NAME gpu.cuda_emu.parity.moe.sdar COMMAND gpu_parity_emu --variant 1
         ${CMAKE_BINARY_DIR}/fixtures/dec_sdarmoe)
add_test(NAME gpu.cuda_emu.parity.moe.q8 COMMAND gpu_parity_emu --q8 --variant 1
         ${CMAKE_BINARY_DIR}/fixtures/dec_llada2)
set_tests_properties(gpu.cuda_emu.parity.moe gpu.cuda_emu.parity.moe.sdar
                     gpu.cuda_emu.parity.moe.q8 PROPERTIES
                     FIXTURES_REQUIRED "llada2_dec_model;sdarmoe_dec_model" LABELS gpu
                     TIMEOUT 1500 ENVIRONMENT FL_CUDA_MOE=1)
# the emulation itself: kernels' barriers and turns, the runtime's queues, capture, checks
add_executable(test_cuda_emu ${FL_TESTS_DIR}/cuda_emu/test_cuda_emu.cc)
target_include_directories(test_cuda_emu PRIVATE ${FL_TESTS_DIR}/cuda_emu/include
                           ${FL_TESTS_DIR}/unit)
target_compile_options(test_cuda_emu PRIVATE -Wno-unknown-pragmas)
target_link_libraries(test_cuda_emu PRIVATE fl_cuda_emu)
add_test(NAME unit.test_cuda_emu COMMAND test_cuda_emu)
set_tests_properties(unit.test_cuda_emu PROPERTIES LABELS unit TIMEOUT 120)
# The scheduler (gpu_sched --graph-sim: the graph cache simulated against the backend's own
# counters) and the whole server (tests/gpu/serve.sh) on the emulated GPU
add_executable(gpu_sched_emu ${FL_TESTS_DIR}/gpu/gpu_sched.c
               ${CMAKE_SOURCE_DIR}/server/bench/bench_common.c)
target_include_directories(gpu_sched_emu PRIVATE ${CMAKE_SOURCE_DIR}/server/bench)
target_link_libraries(gpu_sched_emu PRIVATE fl_backends_emu Threads::Threads)
include(${CMAKE_SOURCE_DIR}/server/sources.cmake)
pkg_check_modules(LWS REQUIRED IMPORTED_TARGET libwebsockets)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
add_executable(fogline_emu ${FL_SERVER_SRC})
target_include_directories(fogline_emu PRIVATE ${CMAKE_SOURCE_DIR}/server)
target_link_libraries(fogline_emu PRIVATE fl_backends_emu PkgConfig::LWS PkgConfig::LIBUV
                      PkgConfig::JANSSON PkgConfig::HIREDIS)
fl_server_paths(fogline_emu)
# the benchmark programs (floors, MoE byte counts, variants, the batch scheduler loop) on the
# emulated GPU: their times mean nothing here, only that every run completes
add_executable(gpu_bench_emu ${FL_TESTS_DIR}/gpu/gpu_bench.c)
add_executable(gpu_batch_emu ${FL_TESTS_DIR}/gpu/gpu_batch.c)
foreach(t gpu_bench_emu gpu_batch_emu)
  target_link_libraries(${t} PRIVATE fl_backends_emu Threads::Threads)
endforeach()
# The GPU machine's script itself on the emulated GPU (FL_GPU_EMU, docs/cuda.md): every stage
# of tests/gpu/run.sh but PyTorch's, through these programs, on tiny models, few variants and
# steps, and the script's reading of what only a GPU prints (the benchmark's JSON and goals,
# the per-kernel times, the MoE rows, the scheduler's graph counters against their
# simulation, the batch stage on CUDA). It runs what gpu_sched, gpu_bench --moe and
# gpu_batch ran here on their own before. The tiny MoE models are the decode fixtures.
set(FL_REHEARSAL ${CMAKE_BINARY_DIR}/gpu-rehearsal)
add_test(NAME gpu.rehearsal COMMAND sh -c "rm -rf '${FL_REHEARSAL}' && \
mkdir -p '${FL_REHEARSAL}/moe' && \
ln -s '${CMAKE_BINARY_DIR}/fixtures/dec_llada2' '${FL_REHEARSAL}/moe/llada2-tiny' && \
ln -s '${CMAKE_BINARY_DIR}/fixtures/dec_sdarmoe' '${FL_REHEARSAL}/moe/sdarmoe-tiny' && \
FL_GPU_EMU='${CMAKE_BINARY_DIR}/tests' FL_GPU_MOE_MODELS='${FL_REHEARSAL}/moe' \
FL_GPU_BUILD='${FL_REHEARSAL}/bin' FL_GPU_MODELS='${FL_REHEARSAL}/models' \
OUT='${FL_REHEARSAL}/out' bash '${FL_TESTS_DIR}/gpu/run.sh'")
set_tests_properties(gpu.rehearsal PROPERTIES LABELS gpu TIMEOUT 3600
                     FIXTURES_REQUIRED "llada2_dec_model;sdarmoe_dec_model")
