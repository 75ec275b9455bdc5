"""Reference block-diffusion decoding for fogline models (fogline_model.Model), the behaviour the
C engine's denoiser is compared against.

Layout: the prompt's whole blocks are prefilled (KV stored); its last partial block plus masks
is the first generation block (positions by absolute index, pos // block_size). Every forward
runs the contiguous span [first uncached block .. last running block] against the KV cache. A
block whose tokens were all decided in a forward's INPUT (and all blocks before it too) has exact
KV from that forward, so it is moved into the cache then: the store of block N rides in the same
forward as a denoise step of block N+1 (decode-store overlap; block-causal attention makes it
exact), and blocks enter the cache strictly in order.

Policies (commit = replace a mask with its argmax token; confidence = softmax probability):
  top1       one block at a time; each forward commits the single most confident mask.
  threshold  one block at a time; commits every mask with p > threshold (0.9), at least the top
             one (the SGLang/dInfer rule).
  pipeline   D2F multi-block: a new all-mask block joins when the last running block's decided
             ratio >= tau_add (at most max_blocks running, none after an end token appeared);
             a block is semi-active (commits only p > tau_conf, never forced) until its
             predecessor's decided ratio reaches tau_act (or the predecessor is done), then fully
             active (p > threshold, at least its top one).
Stop: once the earliest block containing <|im_end|> or <|endoftext|> and all blocks before it are
fully decided. Reply = tokens before the first end token.
TPF = (reply tokens + 1 for the end token) / denoising forwards. The prompt prefill is not
counted; store passes never need a forward of their own here (overlap), so none is counted.

Usage: python3 decode.py MODEL_DIR "Where is my order 48213?" [--policy top1|threshold|pipeline]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bpe  # noqa: E402
import datagen  # noqa: E402
import fogline_model  # noqa: E402


class Policy:
    def __init__(self, name, threshold=0.9, tau_add=0.5, tau_act=0.75, tau_conf=0.9,
                 max_blocks=3):
        assert name in ("top1", "threshold", "pipeline")
        self.name = name
        self.threshold = threshold
        self.tau_add = tau_add
        self.tau_act = tau_act
        self.tau_conf = tau_conf
        self.max_blocks = max_blocks if name == "pipeline" else 1


@torch.no_grad()
def generate(model, prompt_ids, policy, mask_id, end_ids, max_new_tokens=128, trace=None,
             recompute=False):
    """-> dict(ids: reply token ids (before the first end token), tokens: all decided tokens
    after the prompt, forwards, tpf). trace: optional list receiving per-forward snapshots.
    recompute: no KV cache, every forward runs the whole sequence from position 0 (a check
    of the cache logic: both must give the same tokens)."""
    bs = model.c.block_size
    P = len(prompt_ids)
    seq = list(prompt_ids)                   # committed + decided tokens, mask_id where unknown
    end_ids = set(end_ids)
    cache = None                             # per layer (k, v): (1, kvh, n_cached, hd)
    n_cached = 0                             # tokens in cache (a multiple of bs)
    nfull = P // bs
    if nfull:
        _, kvs = model(torch.tensor([seq[:nfull * bs]]), pos0=0)
        cache = kvs
        n_cached = nfull * bs
    first_blk = nfull
    last_allowed = (P + max_new_tokens - 1) // bs  # last block index we may open
    # open the first generation block: prompt tail + masks
    seq += [mask_id] * ((first_blk + 1) * bs - len(seq))
    running = [first_blk]                    # opened, not yet cached, in order
    forwards = 0

    def blk_tokens(b):
        return seq[b * bs:(b + 1) * bs]

    def decided_ratio(b):
        t = blk_tokens(b)
        return sum(1 for x in t if x != mask_id) / bs

    def done(b):
        return mask_id not in blk_tokens(b)

    def has_end(b):
        # only generated positions: the prompt's tail in the first block holds <|im_end|> too
        return any(seq[p] in end_ids for p in range(max(P, b * bs), (b + 1) * bs))

    def finished():
        for b in running:
            if not done(b):
                return False
            if has_end(b):
                return True
        return False

    while not finished():
        # pipelining: open new blocks
        if policy.max_blocks > 1:
            while (len([b for b in running if not done(b)]) < policy.max_blocks
                   and running[-1] < last_allowed
                   and not any(has_end(b) for b in running)
                   and decided_ratio(running[-1]) >= policy.tau_add):
                nb = running[-1] + 1
                seq += [mask_id] * bs
                running.append(nb)
        elif done(running[-1]) and running[-1] < last_allowed and not has_end(running[-1]):
            seq += [mask_id] * bs
            running.append(running[-1] + 1)
        if all(done(b) for b in running) and not finished():
            break  # hit max_new_tokens without an end token
        s0 = running[0] * bs
        ids_in = torch.tensor([seq[s0:]])
        if recompute:
            logits, kvs = model(torch.tensor([seq]), pos0=0)
            logits = logits[:, s0:]
            kvs = [(k[:, :, s0:], v[:, :, s0:]) for k, v in kvs]
        else:
            logits, kvs = model(ids_in, pos0=s0, past=cache)
        forwards += 1
        logits = logits[0].float()
        logits[:, mask_id] = float("-inf")
        probs = torch.softmax(logits, dim=-1)
        conf, tok = probs.max(dim=-1)
        # cache the leading blocks that were fully decided in this forward's input
        ncache = 0
        for b in running:
            if done(b):
                ncache += 1
            else:
                break
        # commits
        commits = []
        active = [b for b in running if not done(b)]
        for j, b in enumerate(active):
            pos = [p for p in range(b * bs, (b + 1) * bs) if seq[p] == mask_id]
            if policy.name == "top1":
                best = max(pos, key=lambda p: (conf[p - s0].item(), -p))
                commits.append(best)
                break
            if policy.name == "threshold":
                sel = [p for p in pos if conf[p - s0].item() > policy.threshold]
                if not sel:
                    sel = [max(pos, key=lambda p: (conf[p - s0].item(), -p))]
                commits += sel
                break
            # pipeline
            pred = running[running.index(b) - 1] if running.index(b) > 0 else None
            fully = (j == 0 or pred is None or done(pred)
                     or decided_ratio(pred) >= policy.tau_act)
            if fully:
                sel = [p for p in pos if conf[p - s0].item() > policy.threshold]
                if not sel:
                    sel = [max(pos, key=lambda p: (conf[p - s0].item(), -p))]
            else:
                sel = [p for p in pos if conf[p - s0].item() > policy.tau_conf]
            commits += sel
        for p in commits:
            seq[p] = int(tok[p - s0])
        if trace is not None:
            trace.append({"span": [s0, len(seq)], "commits": sorted(commits),
                          "conf": [conf[p - s0].item() for p in sorted(commits)],
                          "cached_blocks": running[:ncache]})
        if ncache:
            n = ncache * bs
            new = [(k[:, :, :n], v[:, :, :n]) for k, v in kvs]
            if cache is None:
                cache = new
            else:
                cache = [(torch.cat([ck, k], 2), torch.cat([cv, v], 2))
                         for (ck, cv), (k, v) in zip(cache, new)]
            n_cached += n
            running = running[ncache:]
    gen = seq[P:]
    reply = []
    for t in gen:
        if t in end_ids or t == mask_id:
            break
        reply.append(t)
    ended = len(reply) < len(gen) and gen[len(reply)] in end_ids
    n_out = len(reply) + (1 if ended else 0)
    return {"ids": reply, "tokens": gen, "forwards": forwards,
            "tpf": n_out / forwards if forwards else 0.0, "ended": ended}


class Chat:
    """Model + tokenizer from a Hugging Face directory, with ChatML prompts."""

    def __init__(self, model_dir):
        self.model = fogline_model.load_model(model_dir)
        self.tok = bpe.Tokenizer.load(model_dir)
        c = self.model.c.raw
        self.mask_id = c["mask_token_id"]
        eos = c["eos_token_id"]
        self.end_ids = eos if isinstance(eos, list) else [eos]

    def prompt_ids(self, msgs):
        return self.tok.encode(datagen.render(msgs, add_generation_prompt=True))

    def reply(self, msgs, policy, max_new_tokens=128, trace=None):
        r = generate(self.model, self.prompt_ids(msgs), policy, self.mask_id, self.end_ids,
                     max_new_tokens, trace)
        r["text"] = self.tok.decode(r["ids"])
        return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("messages", nargs="+", help="alternating user/assistant contents")
    ap.add_argument("--policy", default="threshold", choices=["top1", "threshold", "pipeline"])
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--trace", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    chat = Chat(a.model_dir)
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": m}
            for i, m in enumerate(a.messages)]
    tr = [] if a.trace else None
    r = chat.reply(msgs, Policy(a.policy), a.max_new_tokens, tr)
    if tr:
        for t in tr:
            print(t)
    print(r["text"])
    print("forwards %d, tpf %.2f, ended %s" % (r["forwards"], r["tpf"], r["ended"]))


if __name__ == "__main__":
    main()
