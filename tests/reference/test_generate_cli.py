#!/usr/bin/env python3
"""`fogline generate` end to end on the built-in model: stop strings cut the reply where they
begin and report finish "stop"; sampling is reproducible from its seed, varies across seeds,
and top_k 1 is greedy; bad flags are one-line errors with exit 2.

  test_generate_cli.py FOGLINE_BIN MODEL_DIR"""
import json
import re
import os
import subprocess
import sys

FAILS = []
CHECKS = [0]


def check(cond, msg):
    CHECKS[0] += 1
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        FAILS.append(msg)


def gen(fogline, model, prompt, *extra):
    r = subprocess.run([fogline, "generate", "--model", model, "--json", "--threads", "2",
                        "--prompt", prompt, "--max-tokens", "64", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("generate failed: %s" % r.stderr)
    return json.loads(r.stdout)


def main():
    fogline, model = sys.argv[1:3]
    prompt = "I want to return the blender from order 55120."
    base = gen(fogline, model, prompt)
    text = base["text"]
    check(len(text) > 12 and base["finish"] in ("stop", "length"), "a greedy reply: %r" % text)
    # a stop string taken from the middle of the greedy reply
    words = text.split()
    stop = " ".join(words[2:4]) if len(words) >= 4 else text[len(text) // 2:]
    cut = gen(fogline, model, prompt, "--stop", stop)
    check(cut["finish"] == "stop", "stop string reports finish stop (%s)" % cut["finish"])
    check(cut["text"] == text[:text.index(stop)], "reply cut where %r begins: %r" % (stop, cut["text"]))
    two = gen(fogline, model, prompt, "--stop", "no such text here", "--stop", stop)
    check(two["text"] == cut["text"], "any of several stop strings cuts")
    # vLLM's stop_reason: the string that cut the reply; null for the model's end token
    check(cut["stop_reason"] == stop and two["stop_reason"] == stop,
          "stop_reason names the stop string (%r, %r)" % (cut["stop_reason"], two["stop_reason"]))
    check(base["stop_reason"] is None, "no stop_reason without a stop (%r)" % base["stop_reason"])
    # every 4-byte window of the reply's first 48 bytes as a stop string (some straddle a
    # commit's boundary), then a shorter one the reply lacks: once the first has cut the text
    # before the window where the second's new occurrences could start, the second searched
    # past the cut text's end (a crash, heap corruption or a wrong cut)
    bad = []
    for k in range(0, min(48, len(text) - 4)):
        w = text[k:k + 4]
        r = subprocess.run([fogline, "generate", "--model", model, "--json", "--threads", "2",
                            "--prompt", prompt, "--max-tokens", "64", "--stop", w, "--stop", "Qz"],
                           capture_output=True, text=True)
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        if out.get("text") != text[:text.index(w)] or out.get("stop_reason") != w:
            bad.append((w, r.returncode, out.get("text"), r.stderr[-200:]))
    check(not bad, "%d windows of the reply as stop strings, each cut where it first begins: %r"
          % (min(48, len(text) - 4), bad[:3]))
    # sampling
    s1 = gen(fogline, model, prompt, "--temperature", "1.0", "--seed", "5")
    s2 = gen(fogline, model, prompt, "--temperature", "1.0", "--seed", "5")
    check(s1["ids"] == s2["ids"], "same seed, same sample")
    # a request's whole seed range (0..2^53-1): the server reports seeds up to 2^52 to replay
    big = gen(fogline, model, prompt, "--temperature", "1.0", "--seed", "9007199254740991")
    check(len(big["ids"]) > 0, "the largest seed a request may send is taken")
    # (on a prompt outside the model's training data, where it is unsure: on a help-desk
    # question the trained model is confident enough that every seed may give the same reply)
    odd = "Tell me about zebras and pianos."
    outs = {tuple(gen(fogline, model, odd, "--temperature", "1.5", "--seed", str(k))["ids"])
            for k in range(1, 7)}
    check(len(outs) >= 2, "different seeds give different samples (%d distinct of 6)" % len(outs))
    # top_k 1 leaves one candidate per position: the seed no longer matters
    k1 = {tuple(gen(fogline, model, prompt, "--temperature", "1.5", "--top-k", "1", "--seed", str(k))["ids"])
          for k in (1, 2, 3)}
    check(len(k1) == 1, "top_k 1 is seed-independent (%d distinct of 3)" % len(k1))
    p1 = {tuple(gen(fogline, model, prompt, "--temperature", "1.5", "--top-p", "0.0001", "--seed", str(k))["ids"])
          for k in (1, 2, 3)}
    check(p1 == k1, "top_p 0.0001 keeps only the top token too")
    # --weights: auto holds the built-in model's bf16 as it is; f32 widens it exactly, so the
    # greedy reply is the same; the flag wins over FOGLINE_WEIGHTS
    auto = gen(fogline, model, prompt, "--temperature", "0")
    f32 = gen(fogline, model, prompt, "--temperature", "0", "--weights", "f32")
    check(auto["weights"] == "bf16" and f32["weights"] == "f32",
          "weights auto -> %s, f32 -> %s" % (auto["weights"], f32["weights"]))
    check(auto["ids"] == f32["ids"], "bf16 and f32 weights give the same greedy reply")
    os.environ["FOGLINE_WEIGHTS"] = "f32"
    env_f32 = gen(fogline, model, prompt, "--temperature", "0")
    flag_wins = gen(fogline, model, prompt, "--temperature", "0", "--weights", "bf16")
    del os.environ["FOGLINE_WEIGHTS"]
    check(env_f32["weights"] == "f32" and flag_wins["weights"] == "bf16",
          "FOGLINE_WEIGHTS f32 -> %s; with --weights bf16 -> %s" % (env_f32["weights"],
                                                                    flag_wins["weights"]))
    # q8 / q4: quantized at load, said in the JSON; a reply comes out (its quality is bench
    # decode's table, its arithmetic test_forward's)
    for w in ("q8", "q4"):
        q = gen(fogline, model, prompt, "--temperature", "0", "--weights", w)
        check(q["weights"] == w and len(q["ids"]) > 0 and q["text"],
              "--weights %s: holds %s, %d reply tokens" % (w, q["weights"], len(q["ids"])))
        # every kernel level computes the same bits (kernels.h): the prompt's prefill and the
        # steps of 16 rows (a block of 8 denoised with the one before it stored) take AMX
        # where the CPU has it, VNNI with FL_SIMD=avx512, AVX2 with avx2; the same reply and
        # log probabilities to the last bit, sampled too (the JSON's floats print exactly)
        for extra in (("--temperature", "0"), ("--temperature", "1", "--seed", "7")):
            runs = {}
            for cap in ("", "avx512", "avx2"):
                if cap:
                    os.environ["FL_SIMD"] = cap
                runs[cap] = gen(fogline, model, prompt, "--weights", w, "--logprobs", "2", *extra)
                os.environ.pop("FL_SIMD", None)
            same = all(runs[c]["ids"] == runs[""]["ids"] and runs[c]["logprobs"] == runs[""]["logprobs"]
                       for c in runs)
            check(same and len(runs[""]["logprobs"]) == len(runs[""]["ids"]),
                  "--weights %s %s: the same reply and logprobs at every kernel level (%s)" %
                  (w, " ".join(extra), ", ".join("%s: %d tokens" % (c or "auto", len(r["ids"]))
                                                 for c, r in runs.items())))
    # --kv-format (on the CPU, where auto is f32): bf16 pages round the keys and values, a
    # reply comes out and the JSON says what the pages hold; the flag wins over
    # FOGLINE_KV_FORMAT (the exactness of bf16 pages is test_forward's and test_sched's)
    kv_auto = gen(fogline, model, prompt, "--temperature", "0", "--device", "cpu")
    kv16 = gen(fogline, model, prompt, "--temperature", "0", "--device", "cpu", "--kv-format", "bf16")
    check(kv_auto["kv_format"] == "f32" and kv16["kv_format"] == "bf16" and len(kv16["ids"]) > 0,
          "kv auto -> %s; --kv-format bf16 -> %s, %d reply tokens" % (kv_auto["kv_format"],
                                                                       kv16["kv_format"],
                                                                       len(kv16["ids"])))
    os.environ["FOGLINE_KV_FORMAT"] = "bf16"
    env16 = gen(fogline, model, prompt, "--temperature", "0", "--device", "cpu")
    kv_flag = gen(fogline, model, prompt, "--temperature", "0", "--device", "cpu", "--kv-format", "f32")
    del os.environ["FOGLINE_KV_FORMAT"]
    check(env16["kv_format"] == "bf16" and kv_flag["kv_format"] == "f32",
          "FOGLINE_KV_FORMAT bf16 -> %s; with --kv-format f32 -> %s" % (env16["kv_format"],
                                                                        kv_flag["kv_format"]))
    # bad flags
    BIAS_SYNTAX = ("--logit-bias takes ID:BIAS pairs (a token id, a bias in [-100, 100]) "
                   "separated by commas, got ")
    for args, word in ((["--threshold", "2"], "threshold"), (["--policy", "bogus"], "policy"),
                       (["--max-tokens", "0"], "max-tokens"), (["--top-p", "x"], "top-p"),
                       (["--weights", "q6"], "--weights must be auto, f32, bf16, q8 or q4, got 'q6'"),
                       (["--weights", ""], "--weights must be auto, f32, bf16, q8 or q4, got ''"),
                       ({"FOGLINE_WEIGHTS": "half"}, "FOGLINE_WEIGHTS must be auto, f32, bf16, q8 or q4, got 'half'"),
                       (["--kv-format", "f16"], "--kv-format must be auto, f32 or bf16, got 'f16'"),
                       (["--kv-format", ""], "--kv-format must be auto, f32 or bf16, got ''"),
                       ({"FOGLINE_KV_FORMAT": "BF16"}, "FOGLINE_KV_FORMAT must be auto, f32 or bf16, got 'BF16'"),
                       (["--logprobs", "2"], "--logprobs adds \"logprobs\" to --json's output"),
                       (["--json", "--logprobs", "21"], "--logprobs takes an integer in [0, 20], got '21'"),
                       (["--json", "--logprobs", "-1"], "--logprobs takes an integer in [0, 20], got '-1'"),
                       (["--json", "--logprobs", "x"], "--logprobs takes an integer in [0, 20], got 'x'"),
                       (["--json", "--logprobs", ""], "--logprobs takes an integer in [0, 20], got ''"),
                       *((["--logit-bias", v], BIAS_SYNTAX + "'%s'" % v)
                         for v in ("", "5", "5:", ":1", "a:1", "5:x", "5:101", "5:-100.5", "5:1,",
                                   "5:1;6:2", "-3:1", "5:nan", "5:inf")),
                       *((["--min-tokens", v], "--min-tokens takes a count of tokens, got '%s'" % v)
                         for v in ("", "x", "-1", "4k")),
                       *(([f, v], "%s takes a number in [-2, 2], got '%s'" % (f, v))
                         for f in ("--presence-penalty", "--frequency-penalty")
                         for v in ("", "x", "2.5", "-3", "nan")),
                       *((["--repetition-penalty", v],
                          "--repetition-penalty takes a number in (0, 10], got '%s'" % v)
                         for v in ("", "x", "0", "-1", "10.5", "nan")),
                       *((["--stop-token-ids", v],
                          "--stop-token-ids takes token ids separated by commas, got '%s'" % v)
                         for v in ("", "x", "5,", ",5", "5;6", "-3", "1.5", "5, 6")),
                       (["--stop-token-ids", ",".join(["7"] * 257)],
                        "--stop-token-ids names more than 256 tokens"),
                       *((["--seed", v], "--seed needs an integer in [0, 2^53-1], got '%s'" % v)
                         for v in ("", "x", "-1", "9007199254740992", "1e3")),
                       (["--min-p", "1.5"], "min_p must be in [0, 1], got 1.5"),
                       (["--min-p", "x"], "min-p")):
        env = dict(os.environ, **args) if isinstance(args, dict) else None
        args = [] if isinstance(args, dict) else args
        r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi", *args],
                           capture_output=True, text=True, env=env)
        line = r.stderr.strip()
        check(r.returncode == 2 and word in line and "\n" not in line,
              "bad %s -> exit %d, %r" % (" ".join(args), r.returncode, line))
    # --logit-bias: an id outside the vocabulary is the engine's one-line refusal; a ban keeps
    # the token out and changes the reply, a +100 fills it (decode.parity_logprobs checks the
    # values against the reference)
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi",
                        "--logit-bias", "5:1,%d:2" % vocab], capture_output=True, text=True)
    line = r.stderr.strip()
    check(r.returncode == 1 and line == "fogline generate: logit_bias: token %d is outside the "
          "vocabulary (%d ids)" % (vocab, vocab),
          "--logit-bias %d -> exit %d, %r" % (vocab, r.returncode, line))
    r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi",
                        "--stop-token-ids", "5,%d" % vocab], capture_output=True, text=True)
    line = r.stderr.strip()
    check(r.returncode == 1 and line == "fogline generate: stop_token_ids: token %d is outside "
          "the vocabulary (%d ids)" % (vocab, vocab),
          "--stop-token-ids %d -> exit %d, %r" % (vocab, r.returncode, line))
    r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi", "--json-object",
                        "--stop-token-ids", "5"], capture_output=True, text=True)
    line = r.stderr.strip()
    check(r.returncode == 1 and line == "fogline generate: stop_token_ids cannot be combined "
          "with an output constraint: a stop token could cut its reply short",
          "--stop-token-ids with --json-object -> exit %d, %r" % (r.returncode, line))
    r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi", "--max-tokens", "8",
                        "--min-tokens", "9"], capture_output=True, text=True)
    line = r.stderr.strip()
    check(r.returncode == 1 and line == "fogline generate: min_tokens must be in [0, max_tokens 8], "
          "got 9", "--min-tokens 9 -> exit %d, %r" % (r.returncode, line))
    base = [fogline, "generate", "--model", model, "--prompt", "Where is my order 48213?", "--json",
            "--temperature", "0", "--max-tokens", "16"]
    plain = json.loads(subprocess.run(base, capture_output=True, text=True).stdout)
    ban = plain["ids"][0]
    banned = json.loads(subprocess.run(base + ["--logit-bias", "%d:-100" % ban], capture_output=True,
                                       text=True).stdout)
    check(ban not in banned["ids"] and banned["ids"] != plain["ids"],
          "--logit-bias %d:-100: %s (unbiased %s)" % (ban, banned["ids"], plain["ids"]))
    filled = json.loads(subprocess.run(base + ["--logit-bias", "%d:100" % plain["ids"][2]],
                                       capture_output=True, text=True).stdout)
    check(filled["ids"] == [plain["ids"][2]] * 16, "--logit-bias +100: %s" % filled["ids"])
    # --schema / --json-object: the reply is a value of the schema (checked here by Python's
    # json and the schema's own terms), and the unconstrained reply's text is inside it
    import tempfile
    with tempfile.TemporaryDirectory() as td:
        order = os.path.join(td, "order.json")
        with open(order, "w") as f:
            json.dump({"type": "object", "properties": {"status": {"enum": ["pending", "shipped"]},
                       "eta_days": {"type": "integer"}}, "required": ["status", "eta_days"],
                       "additionalProperties": False}, f)
        r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "Where is my order?",
                            "--schema", order, "--json"], capture_output=True, text=True)
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        v = json.loads(out.get("text", "null")) if out else None
        check(isinstance(v, dict) and v.get("status") in ("pending", "shipped") and
              isinstance(v.get("eta_days"), int) and set(v) == {"status", "eta_days"},
              "--schema: %r (%s)" % (out.get("text"), r.stderr.strip()))
        check(out.get("stats", {}).get("constrained", 0) > 0, "--schema: stats.constrained")
        string = os.path.join(td, "string.json")
        with open(string, "w") as f:
            f.write('{"type": "string"}')
        # the model's own reply, its first word given up for the opening quote
        free = gen(fogline, model, "Where is my order?")
        r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "Where is my order?",
                            "--threads", "2", "--max-tokens", "64", "--schema", string, "--json"],
                           capture_output=True, text=True)
        quoted = json.loads(json.loads(r.stdout)["text"]) if r.returncode == 0 else None
        check(isinstance(quoted, str) and quoted.split() == free["text"].split()[1:],
              "--schema string: %r vs %r" % (quoted, free["text"]))
        r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi", "--json-object",
                            "--json"], capture_output=True, text=True)
        check(r.returncode == 0 and isinstance(json.loads(json.loads(r.stdout)["text"]), dict),
              "--json-object: %s %s" % (r.stdout[:200], r.stderr.strip()))
        # --regex: the whole reply matches (structured_outputs' regex)
        for pattern in (r"Order \d{5} (shipped|is late)\.", r"[a-z]+( [a-z]+){2,4}"):
            r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "Where is my order?",
                                "--regex", pattern, "--json"], capture_output=True, text=True)
            text = json.loads(r.stdout)["text"] if r.returncode == 0 else None
            check(text is not None and re.fullmatch(pattern, text) is not None,
                  "--regex %s: %r (%s)" % (pattern, text, r.stderr.strip()))
        bad = os.path.join(td, "bad.json")
        with open(bad, "w") as f:
            f.write('{"type": "array", "minContains": 1}')
        for args, code, word in ((["--schema", bad], 1, "unsupported keyword 'minContains'"),
                                 (["--schema", os.path.join(td, "none.json")], 1, "none.json"),
                                 (["--schema", order, "--json-object"], 2, "give one of"),
                                 (["--regex", "a", "--json-object"], 2, "give one of"),
                                 (["--regex", "(?=a)"], 1, "--regex: the pattern: unsupported: lookahead"),
                                 (["--regex", "\udcff"], 1, "invalid UTF-8"),  # byte 0xff
                                 (["--schema", order, "--max-tokens", "3"], 1,
                                  "the shortest reply the constraint allows takes")):
            r = subprocess.run([fogline, "generate", "--model", model, "--prompt", "hi", *args],
                               capture_output=True, text=True)
            line = r.stderr.strip()
            check(r.returncode == code and word in line and "\n" not in line,
                  "%s -> exit %d, %r" % (" ".join(args), r.returncode, line))
    print("%d passed, %d failed" % (CHECKS[0] - len(FAILS), len(FAILS)))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
