#!/usr/bin/env python3
"""Writes a stand-in tokenizer for LLaDA2 (llada2_moe) test models: tokenizer.json and
tokenizer_config.json in OUT_DIR.

  make_ling_tokenizer.py OUT_DIR

LLaDA2's real tokenizer.json (Ling 2.0's byte-level BPE, 157,184 ids) is not reachable here.
This one is a small byte-level BPE learned from the text below (deterministic: the same files on
every run), with the special tokens at the ids the real one gives them where those are known,
and the real chat template (tests/data/tokenizer/llada2_chat.jinja) in tokenizer_config.json.
Every id it emits is below 157,184 and its highest id is 157,183, so its vocabulary size is the
model's; the ids between the learned tokens and the special ones are gaps (no token), which
fogline and @huggingface/tokenizers both accept.

Special tokens (tests/data/tokenizer/README.md says where each id comes from):
  156891 <|startoftext|>  156892 <|endoftext|>  156893 [CLS]  156894 [gMASK]  156895 <|mask|>
  157151 <role>  157152 </role>  157183 <|role_end|> (placeholder: its real LLaDA2 id is unknown)

Ids 0..255 are the 256 bytes in GPT-2's ByteLevel order (the real vocabulary starts "!", "\"",
"#", ... the same way); learned merges follow from 256. The pre-tokenizer is Qwen2/3's Split
regex + ByteLevel and the normalizer NFC (assumed: the real ones are not known here)."""
import json
import os
import re
import sys

VOCAB_SIZE = 157184
SPECIALS = [
    (156891, "<|startoftext|>"),
    (156892, "<|endoftext|>"),
    (156893, "[CLS]"),
    (156894, "[gMASK]"),
    (156895, "<|mask|>"),
    (157151, "<role>"),
    (157152, "</role>"),
    (157183, "<|role_end|>"),
]
NUM_MERGES = 1500
SPLIT_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
               "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

CORPUS = """
<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Write a brief introduction
of the great wall.<|role_end|><role>ASSISTANT</role>The Great Wall of China is a series of
fortifications built across the historical northern borders of ancient Chinese states and
Imperial China as protection against various nomadic groups from the Eurasian Steppe. Several
walls were built from as early as the 7th century BC, with selective stretches later joined
together by Qin Shi Huang, the first emperor of China.<|role_end|>
<role>HUMAN</role>What is 2+2? Answer with a number.<|role_end|><role>ASSISTANT</role>4<|role_end|>
<role>HUMAN</role>Solve: a train travels 120 kilometres in 1.5 hours. What is its average speed?
<|role_end|><role>ASSISTANT</role>The average speed is distance divided by time: 120 / 1.5 = 80,
so the train travels at 80 kilometres per hour.<|role_end|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather
in a given location", "parameters": {"type": "object", "properties": {"location": {"type":
"string", "description": "The city and state, e.g. San Francisco, CA"}}, "required":
["location"]}}}
</tools>

For each function call, return a json object with function name and arguments within
<tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>
<role>OBSERVATION</role>
<tool_response>
{"temperature": 21, "unit": "celsius", "condition": "sunny"}
</tool_response>
<think>
The user wants the weather. I should call the tool, then report the temperature.
</think>

def block_diffusion(model, prompt, block_size=32, steps=32, threshold=0.95):
    x = prompt + [mask_id] * block_size
    for step in range(steps):
        logits = model(x)
        probs = softmax(logits, dim=-1)
        confidence, tokens = probs.max(dim=-1)
        for i in range(len(x)):
            if x[i] == mask_id and confidence[i] > threshold:
                x[i] = tokens[i]
    return x

static int fl_buf_append(fl_buf *b, const void *p, size_t n)
{
    if (b->err)
        return b->err;
    memcpy(b->data + b->len, p, n);
    return 0;
}

Diffusion language models generate text by iteratively unmasking tokens in parallel. Instead
of producing one token at a time from left to right, the model starts from a block of masked
positions and, at every step, commits the positions it is most confident about. Block diffusion
keeps the key-value cache of earlier blocks, so the cost of a long answer grows block by block.
It's a trade-off: we'll decode faster when they're confident, and you've seen that I'd rather be
correct than quick. Numbers such as 3.14159, 2025-10-21, 1,000,000 and 0x7fff appear in text.
大型语言模型可以回答问题、写代码和翻译文本。扩散语言模型并行地生成多个词元。
你好，世界！今天天气很好，我们去公园散步吧。
Les modèles de langue à diffusion génèrent plusieurs jetons à la fois. Ünïcödé ß straße café.
Emoji: 👍 🎉 ❤️ and more.
"""


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters, as a list in vocabulary order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def pieces(text):
    """Pre-tokenisation for training only, close to SPLIT_REGEX (Python's re has no \\p{L})."""
    letters = r"[^\W\d_]"
    pat = (r"'(?i:s|t|re|ve|m|ll|d)|[^\r\n\w]?" + letters + r"+|_" + letters + r"*|\d| ?(?:[^\s\w]|_)+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    return re.findall(pat, text)


def learn(corpus, byte_char):
    words = {}
    for p in pieces(corpus):
        w = tuple(byte_char[b] for b in p.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(NUM_MERGES):
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))  # ties: the greater pair, fixed
        if best[1] < 2:
            break
        a, b = best[0]
        merges.append((a, b))
        nw = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return merges


def main():
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    order = bytes_to_unicode()
    byte_char = {b: ch for b, ch in order}
    vocab = {ch: i for i, (_, ch) in enumerate(order)}
    merges = learn(CORPUS, byte_char)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    assert len(vocab) < SPECIALS[0][0]
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in SPECIALS]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "data", "tokenizer", "llada2_chat.jinja"), encoding="utf-8") as f:
        template = f.read()
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
        "bos_token": "<|startoftext|>",
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "cls_token": "[CLS]",
        "eos_token": "<|endoftext|>",
        "gmask_token": "[gMASK]",
        "mask_token": "<|mask|>",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    print(f"{out}: {len(vocab)} learned and byte tokens ({len(merges)} merges), {len(added)} special "
          f"tokens, ids up to {max(i for i, _ in SPECIALS)} (vocab_size {VOCAB_SIZE})")


if __name__ == "__main__":
    main()
