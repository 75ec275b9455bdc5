"""Trains fogline-helpdesk, fogline's built-in default model: a small block-diffusion chat model
(Qwen3 layout, fogline_model.Model) on datagen's synthetic help-desk dialogues.

Objective: block diffusion with diffusion forcing (D2F). Sequence = ChatML context up to and
including "<|im_start|>assistant\\n" (never masked) + reply + <|im_end|> + <|endoftext|> up to
the end of that block + one all-<|endoftext|> block. Blocks are by ABSOLUTE position
(pos // block_size), so the prompt's last partial block is shared with the reply's first tokens,
as at inference. Each reply block gets its own mask ratio, non-decreasing from block to block:
  - half the examples: sorted uniform ratios, one per block;
  - the other half: clean prefix, one "active" block k with ratio U(0.05, 1], all later blocks
    fully masked (what a pipelined decoder sees when it adds a new block early).
--noise active (the second run): clean prefix, one active block with ratio U(0,1], 30% of the time
(--p-next) the next block too with a ratio >= the active one's, the sequence cut after them; no
fully masked far blocks. --slot-w W weights the loss of slot targets (digit tokens, and tokens
outside the 300 most frequent reply tokens that also occur in the prompt) W times.
Attention is block-causal over the noisy sequence (fogline_model.block_causal_mask, the
model's default). Loss: plain cross-entropy averaged over the masked positions of the batch (no
1/ratio weighting: with ratios near 0 it makes the loss spiky at this tiny batch size).

Time-boxed: the run measures its speed for the first --calib-s seconds, then fixes the step count
so that the loop ends --budget-min minutes after the process started (re-estimated every 200
steps, both ways, until 80% of the run). The chosen step count is logged; pass --steps N to repeat a run.

--procs 2 --threads 1 (eighteenth run on): two data-parallel processes share every batch (Procs,
batch_grads); same gradients as one process, 1.3x its tokens/s on the 2-core machine.

Checkpoints (WORK/ckpt.pt, every --ckpt-every-s) hold the whole loop state; the same command with
--resume continues a run that died or was stopped, bit-identically (tests/train/test_resume.py).

Usage (see README.md):
  OMP_WAIT_POLICY=PASSIVE nice -n 10 python3 engine/train/train.py --budget-min 66 \\
      --export engine/models/fogline-helpdesk > /tmp/fogline-train.log 2>&1 &
"""
import argparse
import ctypes
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bpe  # noqa: E402
import datagen  # noqa: E402
import fogline_model  # noqa: E402


RANK = 0  # --procs: this process's rank; only rank 0 logs and writes files


def log(*a):
    if RANK == 0:
        print(time.strftime("%H:%M:%S"), *a, flush=True)


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def jemalloc_purge():
    """Returns the dirty pages of every jemalloc arena to the kernel (mallctl arena.<all>.purge);
    False when jemalloc is not the process's malloc (LD_PRELOAD). With page purging off
    (dirty_decay_ms:-1, which --bf16 needs for speed) jemalloc never returns a freed page, and
    the attention tensors' sizes change with every batch: the nineteenth run's rank 1 grew to
    12.4 GB of resident memory in 26 minutes and was killed by the kernel (out of memory). A
    purge every --purge-every steps bounds it at the cost of refaulting one step's pages."""
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except AttributeError:
        return False
    return mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0)) == 0  # ALL = 4096


class Procs:
    """--procs N (eighteenth run): data parallelism over N single-threaded processes. On the
    2-core machine two 1-thread processes train 1.3x the tokens per second of one 2-thread
    process, all-reduce included (PyTorch's intra-op threads gain little on the many small
    elementwise ops of this model). Every step splits the batch's examples between the ranks, sums the loss weights
    and the gradients over them (gloo all-reduce), and every rank then takes the same clipped
    AdamW step from the same gradients, so the weights stay identical; the loss is the one
    the single-process run computes for the whole batch (sum of weighted cross-entropies over
    the batch's total weight). Rank 0 alone logs, plans the step count and writes files."""

    def __init__(self, n, rank, port):
        self.n, self.rank = n, rank
        if n > 1:
            import torch.distributed as dist
            self.dist = dist
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                    rank=rank, world_size=n)

    def part(self, idx):
        return idx[self.rank::self.n] if self.n > 1 else idx

    def sum_(self, t):
        if self.n > 1:
            self.dist.all_reduce(t)
        return t

    def sum_grads(self, params, extra):
        """Sums every parameter's gradient (None counts as zeros) and the floats in extra over
        the ranks, in one all-reduce; returns the summed extra values."""
        if self.n == 1:
            return extra
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in params] + [torch.tensor(extra, dtype=torch.float32)])
        self.dist.all_reduce(flat)
        o = 0
        for p in params:
            g = flat[o:o + p.numel()].view_as(p)
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            o += p.numel()
        return flat[o:].tolist()

    def gather_ints(self, v):
        """[v of rank 0, v of rank 1, ...] on every rank."""
        if self.n == 1:
            return [v]
        t = torch.zeros(self.n, dtype=torch.int64)
        t[self.rank] = v
        self.dist.all_reduce(t)
        return t.tolist()

    def gather_obj(self, o):
        """[o of rank 0, o of rank 1, ...] (any picklable object) on every rank."""
        if self.n == 1:
            return [o]
        out = [None] * self.n
        self.dist.all_gather_object(out, o)
        return out

    def close(self):
        """Leaves the group together: a rank that exits while its peer still holds the
        connection can be aborted by gloo (SIGABRT seen under load when --stop-at returned)."""
        if self.n > 1:
            self.dist.barrier()
            self.dist.destroy_process_group()

    def broadcast_int(self, v):
        if self.n == 1:
            return v
        t = torch.tensor([v], dtype=torch.int64)
        self.dist.broadcast(t, 0)
        return int(t.item())

    def same_weights(self, params):
        """True when every rank holds rank 0's weights bit for bit."""
        if self.n == 1:
            return True
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        ref = flat.clone()
        self.dist.broadcast(ref, 0)
        ok = torch.tensor([int(torch.equal(flat, ref))], dtype=torch.int64)
        self.dist.all_reduce(ok)
        return int(ok.item()) == self.n


def make_config(a, tok):
    return {
        "architectures": ["FoglineForDiffusionLM"],
        "model_type": "fogline",
        "hidden_size": a.hidden,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "intermediate_size": a.inter,
        "hidden_act": "silu",
        "vocab_size": tok.size,
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "block_size": a.block,
        "mask_token_id": tok.mask,
        "bos_token_id": None,
        "eos_token_id": [tok.im_end, tok.eot],
        "pad_token_id": tok.eot,
        "torch_dtype": "bfloat16",
    }


def init_weights(m, n_layers, qk_gain=1.0):
    """Qwen-style init: N(0, 0.02) everywhere, residual outputs scaled by 1/sqrt(2 * layers).
    qk_gain (twelfth run): the q_norm/k_norm weights start at this value instead of 1. With
    QK-norm a logit q.k/sqrt(head_dim) is at most sqrt(head_dim) x gain^2 (8 at head_dim 64 and
    gain 1), less than copying one of ~200 prompt positions sharply needs (v4 grew its later
    layers' gains to 1.2-1.9)."""
    for name, p in m.named_parameters():
        if p.dim() == 1:
            if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                with torch.no_grad():
                    p.fill_(qk_gain)
            continue  # the other norms stay 1
        std = 0.02
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            std = 0.02 / math.sqrt(2 * n_layers)
        torch.nn.init.normal_(p, 0.0, std)


def small_model(tok, bs):
    """A 2-layer float32 model with init_weights' random weights, for the tests
    (tests/train/test_dual.py, test_procs.py): hidden 64, 4 query heads / 2 KV heads of 16,
    block size bs."""
    class A:
        hidden, layers, heads, kv_heads, head_dim, inter, block = 64, 2, 4, 2, 16, 128, bs
    model = fogline_model.Model(fogline_model.Config(make_config(A, tok)))
    init_weights(model, 2)
    return model


def build_example(tok, msgs, bs):
    """-> (ids list, P, spans): P = prompt length; the final reply's target region is
    [P, len(ids)). spans: (start, end) of every EARLIER assistant reply inside the prompt, end
    just past its <|im_end|> (--noise dual trains those turns too; the other modes ignore them)."""
    prompt = datagen.render(msgs[:-1], add_generation_prompt=True)
    p_ids = tok.encode(prompt)
    r_ids = tok.encode(msgs[-1]["content"]) + [tok.im_end]
    ids = p_ids + r_ids
    L = -(-len(ids) // bs) * bs + bs  # end of im_end's block, plus one all-pad block
    ids = ids + [tok.eot] * (L - len(ids))
    spans = []
    for k in range(len(msgs) - 1):
        if msgs[k]["role"] != "assistant":
            continue
        pre = tok.encode(datagen.render(msgs[:k], add_generation_prompt=True))
        rs = len(pre)
        body = tok.encode(msgs[k]["content"])
        re_ = rs + len(body)
        # the turn's tokens must be exactly those the prompt holds (same pre-token boundaries)
        if (p_ids[:rs] == pre and p_ids[rs:re_] == body and re_ < len(p_ids)
                and p_ids[re_] == tok.im_end):
            if spans and (spans[-1][1] - 1) // bs >= rs // bs:
                continue  # shares a block with the previous target turn
            if re_ // bs >= len(p_ids) // bs:
                continue  # shares a block with the final reply
            spans.append((rs, re_ + 1))
    return ids, len(p_ids), spans


COPY_FRAMES = [
    # (user, reply): a generic copying drill (--p-copy), phrased unlike any help-desk turn
    ("{x}", "{x}"),
    ("Please repeat: {x}", "{x}"),
    ("Copy this exactly: {x}", "{x}"),
    ("Say it back: {x}", "You said: {x}"),
    ("The code is {x}.", "The code is {x}."),
    ("Reference {x}, thanks.", "Reference {x}."),
    ("Label: {x}", "Label {x} noted."),
    ("My code is {x} and my reference is {y}.", "Code {x}, reference {y}."),
    ("My code is {x} and my reference is {y}.", "Reference {y}, code {x}."),
    ("First {x}, then {y}. Repeat the second.", "{y}"),
    ("First {x}, then {y}. Repeat the first.", "{x}"),
]


def copy_string(pieces, r):
    """A random string to copy: sub-word pieces of the vocabulary strung together (half), digit
    runs (a quarter), or e-mail-like strings of invented syllable words (a quarter)."""
    u = r.random()
    if u < 0.5:
        return "".join(r.choice(pieces) for _ in range(r.randint(1, 8))).strip()
    if u < 0.75:
        d = "".join(r.choice("0123456789") for _ in range(r.randint(3, 10)))
        if len(d) > 5 and r.random() < 0.3:
            k = r.randint(2, len(d) - 2)
            d = d[:k] + "-" + d[k:]
        return d
    w = r.choice([".", "_", ""]).join(datagen._pseudo(r) for _ in range(r.randint(1, 2)))
    if r.random() < 0.5:
        w += "@" + datagen._pseudo(r) + r.choice([".com", ".net", ".org"])
    return w


def copy_examples(tok, n, seed, bs):
    """n single-turn copying dialogues (--p-copy): the reply repeats one or two random strings
    from the user's message. Copying whatever the customer wrote (e-mail local parts, invented
    names) is the skill the held-out errors lack and the one that appears last in a run; this
    drill is meant to make it appear in the first few hundred steps."""
    r = random.Random("copy-%d" % seed)
    pieces = []
    for i in range(tok.eot):
        t = tok.decode([i])
        if t.strip() and t.isascii() and t.isprintable() and "<" not in t:
            pieces.append(t)
    out = []
    for _ in range(n):
        user, reply = r.choice(COPY_FRAMES)
        x, y = copy_string(pieces, r), copy_string(pieces, r)
        if not x or not y or x == y:
            continue
        msgs = [{"role": "user", "content": user.format(x=x, y=y)},
                {"role": "assistant", "content": reply.format(x=x, y=y)}]
        out.append(build_example(tok, msgs, bs))
    return out


def make_batches(examples, batch_tokens, bs, rng, length=None):
    """Groups examples of similar length; each batch is padded to its longest member."""
    length = length or (lambda e: len(e[0]))
    order = sorted(range(len(examples)), key=lambda i: (length(examples[i]), rng.random()))
    batches = []
    cur = []
    for i in order:
        L = length(examples[i])
        if cur and (len(cur) + 1) * L > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def slot_token_set(tok, examples, top_common=300):
    """Token ids that carry slot values: every token whose text is all digits, plus tokens that
    are not among the `top_common` most frequent reply tokens (names, products, streets, emails;
    they are up-weighted only where they also occur in the example's prompt)."""
    digits = np.zeros(tok.size, dtype=bool)
    for i in range(len(tok.vocab)):
        t = tok.decode([i]).strip()
        digits[i] = bool(t) and t.isdigit()
    cnt = np.zeros(tok.size, dtype=np.int64)
    for ids, P, _ in examples:
        np.add.at(cnt, np.asarray(ids[P:]), 1)
    common = np.zeros(tok.size, dtype=bool)
    common[np.argsort(-cnt)[:top_common]] = True
    common[[tok.eot, tok.im_start, tok.im_end, tok.mask]] = True
    return digits, common


def noisy_batch(examples, idx, tok, bs, rng, noise="active", p_next=0.3, slot_w=1.0,
                slot_sets=None):
    """-> clean (B,T), noisy (B,T), masked (B,T) bool, weight (B,T) float.

    noise "active" (second run): clean prefix, one active block k (ratio U(0,1]), with
    probability p_next the next block too (ratio U(ratio_k, 1]); the sequence is cut after the
    last included block (block-causal attention: nothing earlier can see what is cut).
    noise "d2f" (first run): half sorted U(0,1) ratios, half clean prefix + active block +
    every later block fully masked.
    slot_w: loss weight of masked targets that are digits, or rare tokens also in the prompt."""
    B = len(idx)
    rows = []
    for i in idx:
        ids, P, _ = examples[i]
        L = len(ids)
        b0, b1 = P // bs, L // bs  # target blocks b0 .. b1-1 (b0 may hold prompt tokens)
        nb = b1 - b0
        if noise == "active":
            k = int(rng.integers(nb))
            ratios = np.zeros(nb)
            ratios[k] = 1.0 - rng.random()  # U(0, 1]
            last = k
            if k + 1 < nb and rng.random() < p_next:
                ratios[k + 1] = rng.uniform(ratios[k], 1.0)
                last = k + 1
            L = (b0 + last + 1) * bs
            ratios = ratios[:last + 1]
        elif rng.random() < 0.5:
            ratios = np.sort(rng.random(nb))
        else:
            k = rng.integers(nb)
            ratios = np.ones(nb)
            ratios[:k] = 0.0
            ratios[k] = rng.uniform(0.05, 1.0)
        pos = np.arange(P, L)
        r = ratios[pos // bs - b0]
        m = rng.random(L - P) < r
        if not m.any():
            # at least one masked position, in the first block with a nonzero ratio
            cand = np.nonzero(r == r[r > 0].min())[0] if (r > 0).any() else np.arange(L - P)
            m[rng.choice(cand)] = True
        rows.append((ids[:L], P, m))
    T = max(len(r[0]) for r in rows)
    clean = np.full((B, T), tok.eot, dtype=np.int64)
    masked = np.zeros((B, T), dtype=bool)
    weight = np.ones((B, T), dtype=np.float32)
    for b, (ids, P, m) in enumerate(rows):
        L = len(ids)
        clean[b, :L] = ids
        masked[b, P:L] = m
        if slot_w != 1.0 and slot_sets is not None:
            digits, common = slot_sets
            tgt = np.asarray(ids[P:])
            in_prompt = np.zeros(tok.size, dtype=bool)
            in_prompt[np.asarray(ids[:P])] = True
            slot = digits[tgt] | (in_prompt[tgt] & ~common[tgt])
            weight[b, P:L][slot] = slot_w
    noisy = np.where(masked, tok.mask, clean)
    return (torch.from_numpy(clean), torch.from_numpy(noisy), torch.from_numpy(masked),
            torch.from_numpy(weight))


def dual_segments(ids, P, spans, bs, all_turns):
    """The noisy copies of an example in --noise dual: [(s, e, rs, re)]: blocks [s, e) copied,
    targets from rs (earlier positions of the first block are the prompt, shown clean), tokens
    from re on are <|endoftext|> (what the decoder writes after <|im_end|>)."""
    L = len(ids)
    segs = []
    if all_turns:
        for rs, re_ in spans:
            segs.append(((rs // bs) * bs, -(-re_ // bs) * bs, rs, re_))
    segs.append(((P // bs) * bs, L, P, L))
    return segs


def dual_len(ids, P, spans, bs, all_turns=False):
    """Length of an example in --noise dual: the clean sequence plus a noisy copy of its target
    blocks (from the block holding the prompt's end; with all_turns, every assistant turn's)."""
    return len(ids) + sum(e - s for s, e, _, _ in dual_segments(ids, P, spans, bs, all_turns))


def dual_batch(examples, idx, tok, bs, rng, p_pipe=0.4, slot_w=1.0, slot_sets=None,
               all_turns=False, end_w=1.0):
    """--noise dual (third run): BD3-LM-style vectorised block diffusion. Each row is the clean
    sequence (block-causal) followed by a noisy copy of its target blocks at the same positions.
    A noisy block sees the clean blocks before it and itself, i.e. exactly what a decoder sees
    when it denoises that block after its predecessor committed, so every target block gets a
    loss in one forward (the --noise active mix trains one block per example).
    With probability p_pipe a turn is "pipelined" (D2F diffusion forcing): ratios are sorted
    non-decreasing and noisy block b sees the noisy blocks of its turn before it instead of the
    clean ones, as when the decoder adds blocks while their predecessors still have masks.
    all_turns (fourth run): every assistant turn of a multi-turn dialogue is a target, not only
    the last (earlier replies sit in the clean sequence as the prompt; their noisy copies end in
    <|endoftext|> after <|im_end|>, as the decoder's blocks do).
    end_w (seventh run): loss weight of the <|im_end|> targets that end a reply (v3 appended a
    second answer after a right one in 4 of its 38 held-out errors).
    -> ids (B,T), pos (B,T), mask (B,T,T) bool, target (B,T), masked (B,T) bool, weight (B,T)."""
    B = len(idx)
    T = max(dual_len(*examples[i], bs, all_turns) for i in idx)
    ids_b = np.full((B, T), tok.eot, dtype=np.int64)
    tgt_b = np.full((B, T), tok.eot, dtype=np.int64)
    pos_b = np.zeros((B, T), dtype=np.int64)
    mask_b = np.zeros((B, T, T), dtype=bool)
    masked_b = np.zeros((B, T), dtype=bool)
    weight_b = np.ones((B, T), dtype=np.float32)
    for b, i in enumerate(idx):
        ids, P, spans = examples[i]
        ids = np.asarray(ids)
        L = len(ids)
        segs = dual_segments(ids, P, spans, bs, all_turns)
        pos_l, tok_l, tgt_l, m_l, turn_l, b0_l, pipe_l = [np.arange(L)], [ids], [ids], \
            [np.zeros(L, bool)], [np.full(L, -1)], [np.zeros(L, np.int64)], [np.zeros(L, bool)]
        for t, (s, e, rs, re_) in enumerate(segs):
            npos = np.arange(s, e)
            nb = (e - s) // bs
            pipe = rng.random() < p_pipe
            ratios = 1.0 - rng.random(nb)  # U(0, 1] per target block
            if pipe:
                ratios = np.sort(ratios)
            tgt = np.where(npos < re_, ids[s:e], tok.eot)
            m = (rng.random(e - s) < ratios[(npos - s) // bs]) & (npos >= rs)
            if not m.any():
                m[rng.integers(rs - s, e - s)] = True
            pos_l.append(npos)
            tgt_l.append(tgt)
            tok_l.append(np.where(m, tok.mask, tgt))
            m_l.append(m)
            turn_l.append(np.full(e - s, t))
            b0_l.append(np.full(e - s, s // bs))
            pipe_l.append(np.full(e - s, pipe))
        pos = np.concatenate(pos_l)
        n = len(pos)
        turn = np.concatenate(turn_l)
        b0 = np.concatenate(b0_l)
        pipe = np.concatenate(pipe_l)
        blk = pos // bs
        noisy = turn >= 0
        bq, bk = blk[:, None], blk[None, :]
        nq, nk = noisy[:, None], noisy[None, :]
        pq = pipe[:, None]
        same = turn[:, None] == turn[None, :]
        clean_clean = ~nq & ~nk & (bk <= bq)
        # noisy block b sees the clean blocks before it (pipelined: before its turn's first
        # block, and every noisy block of its turn up to b: a D2F decoder with all blocks in
        # flight; sorted ratios keep early blocks nearly clean)
        noisy_clean = nq & ~nk & np.where(pq, bk < b0[:, None], bk < bq)
        noisy_noisy = nq & nk & same & np.where(pq, bk <= bq, bk == bq)
        mask_b[b, :n, :n] = clean_clean | noisy_clean | noisy_noisy
        ids_b[b, :n] = np.concatenate(tok_l)
        tgt_b[b, :n] = np.concatenate(tgt_l)
        masked_b[b, :n] = np.concatenate(m_l)
        pos_b[b, :n] = pos
        if n < T:
            pos_b[b, n:] = L  # padding: sees only itself, seen by nobody
            mask_b[b, np.arange(n, T), np.arange(n, T)] = True
        if slot_w != 1.0 and slot_sets is not None:
            digits, common = slot_sets
            in_prompt = np.zeros(tok.size, dtype=bool)
            t_all = tgt_b[b, :n]
            for t, (s, e, rs, re_) in enumerate(segs):
                in_prompt[:] = False
                in_prompt[ids[:rs]] = True
                sel = np.nonzero(turn == t)[0]
                tt = t_all[sel]
                slot = digits[tt] | (in_prompt[tt] & ~common[tt])
                weight_b[b, sel[slot]] = slot_w
    if end_w != 1.0:
        weight_b[(tgt_b == tok.im_end) & masked_b] = end_w
    return tuple(torch.from_numpy(x) for x in (ids_b, pos_b, mask_b, tgt_b, masked_b, weight_b))


def batch_grads(model, procs, params, batch, bf16, weighted):
    """Leaves in params' .grad the gradient of the whole batch's loss, sum(w * ce) / sum(w) over
    the masked positions of every process's share (batch: this process's (noisy, pos, mask,
    clean, masked, weight) from dual_batch, or None when its share is empty; weighted=False:
    w = 1, the plain mean). Returns (loss, tokens) of the whole batch."""
    if batch is not None:
        noisy, pos, amask, clean, masked, weight = batch
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits, _ = model(noisy, mask=amask, pos=pos, head_at=masked)  # (N, vocab)
        ce = F.cross_entropy(logits.float(), clean[masked], reduction="none")
        w = weight[masked] if weighted else torch.ones_like(ce)
        wsum = procs.sum_(w.sum().detach().reshape(1))  # one process: w.sum()
        loss = (ce * w).sum() / wsum[0]
        loss.backward()
        ntok = clean.numel()
    else:
        procs.sum_(torch.zeros(1))
        loss = torch.zeros(())
        ntok = 0
    if procs.n == 1:
        return loss.item(), ntok
    loss_v, ntok = procs.sum_grads(params, [loss.item(), ntok])
    return loss_v, int(ntok)


def export(model, cfg, tok, out_dir, meta=None):
    fogline_model.save_model(model, out_dir, dtype=torch.bfloat16, config=cfg)
    tok.save(out_dir)
    if meta:
        with open(os.path.join(out_dir, "training_meta.json"), "w") as f:
            json.dump(meta, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--inter", type=int, default=704)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=3000, help="BPE target (total, specials incl.)")
    ap.add_argument("--tok-dialogues", type=int, default=30000)
    ap.add_argument("--tok-seed", type=int, default=1, help="the tokenizer's data seed (keep it "
                    "fixed when --init continues a run with another --seed)")
    ap.add_argument("--dialogues", type=int, default=160000)
    ap.add_argument("--batch-tokens", type=int, default=2560)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--steps", type=int, default=0, help="0: pick from measured speed")
    ap.add_argument("--bf16", action="store_true", help="run forward and backward under CPU "
                    "autocast to bfloat16 (weights, optimizer state and loss stay float32); "
                    "a step of v4's shape takes 0.42 s against 0.83 s in float32 on this machine's "
                    "AVX512-BF16 cores. Run it with jemalloc and page purging off "
                    "(LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 "
                    "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1): under glibc's malloc the "
                    "fourteenth run fell from 8,100 to 6,200 tokens/s, under jemalloc with its "
                    "default purging it ran 3,100 (a quarter of the time in the kernel)")
    ap.add_argument("--budget-min", type=float, default=66.0,
                    help="the loop ends this long after the process started")
    ap.add_argument("--calib-s", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="/tmp/fogline-train")
    ap.add_argument("--ckpt-every-s", type=float, default=600.0)
    ap.add_argument("--purge-every", type=int, default=500,
                    help="return jemalloc's freed pages to the kernel every this many steps "
                    "(0: never; see jemalloc_purge)")
    ap.add_argument("--qk-gain", type=float, default=1.0, help="initial q_norm/k_norm weight "
                    "(attention logits up to sqrt(head_dim) x gain^2; see init_weights)")
    ap.add_argument("--init", default="", help="start from this ckpt.pt's weights (a second "
                    "run continuing a first one; the tokenizer and data seed must match)")
    ap.add_argument("--noise", default="d2f", choices=["d2f", "active", "dual"],
                    help="d2f: the first run's mix; active: clean prefix + active block + "
                    "(p-next) the next block, sequence cut after them; dual: clean sequence + "
                    "noisy copy of every target block (see dual_batch)")
    ap.add_argument("--p-pipe", type=float, default=0.4, help="dual: share of pipelined turns")
    ap.add_argument("--all-turns", action="store_true", help="dual: every assistant turn of a "
                    "dialogue is a target, not only the last")
    ap.add_argument("--multi", action="store_true", help="add multi-intent dialogues and outline "
                    "examples (datagen.generate_mixed: skeleton decoding); the tokenizer's data "
                    "is unchanged")
    ap.add_argument("--p-multi", type=float, default=0.15)
    ap.add_argument("--p-outline", type=float, default=0.15)
    ap.add_argument("--p-next", type=float, default=0.3)
    ap.add_argument("--p-system", type=float, default=0.0, help="--multi: share of plain and "
                    "multi-question dialogues that start with a shop's system prompt")
    ap.add_argument("--end-w", type=float, default=1.0, help="dual: loss weight of <|im_end|>")
    ap.add_argument("--slot-w", type=float, default=1.0,
                    help="loss weight of slot tokens (digits; rare tokens also in the prompt)")
    ap.add_argument("--avg-from", type=float, default=0.0, help="also keep a uniform average "
                    "of the weights over the steps after this fraction of the run (0: off) and "
                    "export it to WORK/export-avg")
    ap.add_argument("--ema", type=float, default=0.0, help="also keep an exponential moving "
                    "average of the weights with this decay per step (0: off; from --avg-from "
                    "on) and export it to WORK/export-ema")
    ap.add_argument("--p-copy", type=float, default=0.0, help="share of batches drawn from a "
                    "copying drill at step 0 (copy_examples); falls linearly to --p-copy-end "
                    "at step --copy-until and stays there")
    ap.add_argument("--p-copy-end", type=float, default=0.0)
    ap.add_argument("--copy-until", type=int, default=1500)
    ap.add_argument("--copy-dialogues", type=int, default=60000)
    ap.add_argument("--export", default=os.path.join(HERE, "..", "models", "fogline-helpdesk"))
    ap.add_argument("--procs", type=int, default=1, help="data-parallel processes (gloo on "
                    "127.0.0.1:--port); with --threads 1, 2 processes on the 2-core machine "
                    "train ~1.3x the tokens/s of 1 process with 2 threads (see Procs)")
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--resume", action="store_true",
                    help="continue the run in --work from its ckpt.pt (same command otherwise): "
                    "weights, AdamW state, step plan, batch order and every random stream, so "
                    "the steps after it are those the first process would have taken; "
                    "--budget-min still counts from the first process's start. A file "
                    "WORK/STOP stops a run within 50 steps, after a checkpoint")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="write a checkpoint at this step and exit (tests --resume)")
    a = ap.parse_args()
    if a.procs > 1:
        import torch.multiprocessing as mp
        mp.spawn(run, args=(a,), nprocs=a.procs, join=True)
    else:
        run(0, a)


def load_resume(a):
    """--resume: WORK/ckpt.pt, checked against this command before the data is built."""
    path = os.path.join(a.work, "ckpt.pt")
    if not os.path.exists(path):
        raise SystemExit("--resume: no checkpoint %s" % path)
    ck = torch.load(path)
    if "opt" not in ck:
        raise SystemExit("--resume: %s holds weights only (written before --resume "
                         "existed); start a new run or use --init" % path)
    free = {"resume", "budget_min", "ckpt_every_s", "purge_every", "port", "stop_at", "work",
            "export", "calib_s"}
    diff = sorted(k for k in set(ck["args"]) | set(vars(a)) if k not in free and
                  ck["args"].get(k) != vars(a).get(k))
    if diff:
        raise SystemExit("--resume: the command differs from the checkpoint's in " +
                         ", ".join("--%s (%r, now %r)" % (k.replace("_", "-"),
                                                         ck["args"].get(k), vars(a).get(k))
                                   for k in diff))
    return ck


def run(rank, a):
    global RANK
    RANK = rank
    ck = load_resume(a) if a.resume else None
    procs = Procs(a.procs, rank, a.port)
    t_start = time.time()
    deadline = t_start + a.budget_min * 60
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    prng = random.Random(a.seed)
    # the masks of each rank's share of a batch: one stream per rank (one process: rng itself,
    # so --procs 1 repeats the earlier runs exactly)
    nrng = rng if a.procs == 1 else np.random.default_rng([a.seed, rank])
    os.makedirs(a.work, exist_ok=True)
    log("args", json.dumps(vars(a)))
    with open("/proc/self/maps") as f:
        jemalloc = "jemalloc" in f.read()
    if a.bf16 and (not jemalloc or "dirty_decay_ms:-1" not in os.environ.get("MALLOC_CONF", "")):
        log("warning: --bf16 without jemalloc and MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 "
            "loses up to a quarter of its tokens/s as the run goes on (see --help)")

    # tokenizer
    texts = [datagen.render(d) for d in datagen.generate("train", a.tok_dialogues, a.tok_seed)]
    if a.p_system:
        sr = random.Random("system-%d" % a.tok_seed)
        texts += [datagen.render([{"role": "system",
                                   "content": datagen.system_prompt("train", sr)}])
                  for _ in range(int(a.tok_dialogues * a.p_system))]
    vocab, merges = bpe.train(texts, a.vocab)
    tok = bpe.Tokenizer(vocab, merges)
    if rank == 0:
        tok.save(a.work)
    log("tokenizer: %d tokens (%d merges)" % (tok.size, len(merges)))

    # data: one example per dialogue (its final assistant turn is the target)
    dl = (datagen.generate_mixed("train", a.dialogues, a.seed + 1000, a.p_multi, a.p_outline,
                                 a.p_system)
          if a.multi else datagen.generate("train", a.dialogues, a.seed + 1000))
    examples = [build_example(tok, d, a.block) for d in dl]
    ntok = sum(len(e[0]) for e in examples)
    nrep = sum(len(e[0]) - e[1] for e in examples)
    log("earlier assistant turns usable as targets: %d" % sum(len(e[2]) for e in examples))
    log("data: %d examples, %d tokens (%.1f per example, %.1f target incl. padding)" % (
        len(examples), ntok, ntok / len(examples), nrep / len(examples)))

    cex = []
    if a.p_copy > 0 or a.p_copy_end > 0:
        cex = copy_examples(tok, a.copy_dialogues, a.seed, a.block)
        log("copying drill: %d examples, %.1f tokens each; e.g. %r" % (
            len(cex), sum(len(e[0]) for e in cex) / len(cex),
            tok.decode(cex[0][0], skip_special=False)))
    slot_sets = slot_token_set(tok, examples) if a.slot_w != 1.0 else None
    if slot_sets is not None:
        log("slot weighting x%.1f: %d digit tokens" % (a.slot_w, int(slot_sets[0].sum())))

    cfg = make_config(a, tok)
    if rank == 0:
        with open(os.path.join(a.work, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    procs.sum_(torch.zeros(1))  # a barrier: rank 0's files are written
    model = fogline_model.Model(fogline_model.Config(cfg))
    init_weights(model, a.layers, a.qk_gain)
    if a.init and os.path.isdir(a.init):
        # an exported model directory (its tokenizer must equal this run's)
        with open(os.path.join(a.init, "tokenizer.json")) as f1, \
                open(os.path.join(a.work, "tokenizer.json")) as f2:
            assert f1.read() == f2.read(), "tokenizer differs from --init's"
        model.load_state_dict(fogline_model.load_model(a.init).state_dict())
        log("initialised from %s" % a.init)
    elif a.init:
        model.load_state_dict(torch.load(a.init)["model"])
        log("initialised from %s" % a.init)
    nparam = sum(p.numel() for p in model.parameters())
    log("model: %d params" % nparam)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98), eps=1e-8)

    total = a.steps if a.steps > 0 else 10 ** 9
    auto = a.steps <= 0
    step = 0
    epoch = 0
    seen_tok = 0
    t_loop = time.time()
    t_ckpt = time.time()
    ema = None
    # weight averages (--avg-from, --ema): float32 copies of the parameters, updated after
    # every optimizer step once the run is past --avg-from of its (re-planned) total
    params = list(model.parameters())
    w_avg = w_ema = None
    n_avg = 0
    avg_start = 0
    batches = []
    bi = 0
    cbatches = []
    cbi = 0
    n_copy = 0
    copy_ema = None
    elapsed0 = 0.0  # --resume: seconds the earlier processes ran
    step0 = 0  # the step this process's loop starts at
    tok0 = 0

    def save_ckpt(nstates):
        """The whole loop state: --resume continues from it (written atomically, rank 0)."""
        ck = {"model": model.state_dict(), "step": step, "opt": opt.state_dict(),
              "total": total, "epoch": epoch, "batches": batches, "bi": bi,
              "cbatches": cbatches, "cbi": cbi, "n_copy": n_copy, "copy_ema": copy_ema,
              "ema": ema, "seen_tok": seen_tok, "w_avg": w_avg, "w_ema": w_ema, "n_avg": n_avg,
              "avg_start": avg_start, "rng": rng.bit_generator.state, "prng": prng.getstate(),
              "nrng": nstates, "torch_rng": torch.get_rng_state(), "procs": a.procs,
              "elapsed_s": elapsed0 + time.time() - t_start, "args": vars(a)}
        path = os.path.join(a.work, "ckpt.pt")
        torch.save(ck, path + ".tmp")
        os.replace(path + ".tmp", path)

    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = step0 = ck["step"]
        total, epoch, batches, bi = ck["total"], ck["epoch"], ck["batches"], ck["bi"]
        cbatches, cbi, n_copy, copy_ema = ck["cbatches"], ck["cbi"], ck["n_copy"], ck["copy_ema"]
        ema, seen_tok = ck["ema"], ck["seen_tok"]
        tok0 = seen_tok
        w_avg, w_ema, n_avg, avg_start = ck["w_avg"], ck["w_ema"], ck["n_avg"], ck["avg_start"]
        rng.bit_generator.state = ck["rng"]
        prng.setstate(ck["prng"])
        if a.procs > 1:
            nrng.bit_generator.state = ck["nrng"][rank]
        torch.set_rng_state(ck["torch_rng"])
        elapsed0 = ck["elapsed_s"]
        deadline -= elapsed0
        log("resumed at step %d of %d (epoch %d, batch %d) after %.1f min" % (
            step, total, epoch, bi, elapsed0 / 60))
        del ck
    model.train()
    while step < total:
        if bi >= len(batches):
            batches = make_batches(examples, a.batch_tokens, a.block, prng,
                                   (lambda e: dual_len(*e, a.block, a.all_turns))
                                   if a.noise == "dual" else None)
            bi = 0
            epoch += 1
            log("epoch %d: %d batches" % (epoch, len(batches)))
        p_copy = a.p_copy_end + (a.p_copy - a.p_copy_end) * max(0.0, 1.0 - step / a.copy_until)
        is_copy = bool(cex) and rng.random() < p_copy
        if is_copy:
            if cbi >= len(cbatches):
                cbatches = make_batches(cex, a.batch_tokens, a.block, prng,
                                        (lambda e: dual_len(*e, a.block, a.all_turns))
                                        if a.noise == "dual" else None)
                cbi = 0
            idx = cbatches[cbi]
            cbi += 1
            n_copy += 1
            src = cex
        else:
            idx = batches[bi]
            bi += 1
            src = examples
        idx = procs.part(idx)
        if not idx:  # a batch of fewer examples than processes: this rank adds nothing
            pass
        elif a.noise == "dual":
            noisy, pos, amask, clean, masked, weight = dual_batch(
                src, idx, tok, a.block, nrng, a.p_pipe, a.slot_w, slot_sets, a.all_turns,
                a.end_w)
        else:
            clean, noisy, masked, weight = noisy_batch(src, idx, tok, a.block, nrng, a.noise,
                                                       a.p_next, a.slot_w, slot_sets)
            pos = amask = None
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            prog = min(1.0, (step - a.warmup) / max(1, total - a.warmup))
            lr = a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_v, ntok = batch_grads(model, procs, params,
                                   (noisy, pos, amask, clean, masked, weight) if idx else None,
                                   a.bf16, a.slot_w != 1.0 or a.end_w != 1.0)
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if (a.avg_from > 0 or a.ema > 0) and total < 10 ** 9 and step >= a.avg_from * total:
            with torch.no_grad():
                if w_avg is None:
                    w_avg = [p.detach().clone() for p in params]
                    w_ema = [p.detach().clone() for p in params]
                    n_avg = 1
                    avg_start = step
                    log("weight averages start at step %d" % step)
                else:
                    n_avg += 1
                    for q, p in zip(w_avg, params):
                        q.add_(p.detach() - q, alpha=1.0 / n_avg)
                    if a.ema > 0:
                        for q, p in zip(w_ema, params):
                            q.mul_(a.ema).add_(p.detach(), alpha=1.0 - a.ema)
        seen_tok += int(ntok)
        if is_copy:
            copy_ema = loss_v if copy_ema is None else 0.9 * copy_ema + 0.1 * loss_v
        else:
            ema = loss_v if ema is None else 0.98 * ema + 0.02 * loss_v
        now = time.time()
        if auto and rank == 0 and (total == 10 ** 9 and now - t_loop >= a.calib_s or
                     total < 10 ** 9 and step % 200 == 0):
            rate = (step - step0) / (now - t_loop)
            left = deadline - now
            want = step + int(rate * left)
            if total == 10 ** 9:
                total = want
                log("calibrated: %.2f steps/s, %.0f tok/s -> total %d steps" % (
                    rate, (seen_tok - tok0) / (now - t_loop), total))
            elif want < total * 0.99 or (want > total * 1.02 and step < 0.8 * total):
                # the machine is shared: follow its speed both ways (the first run only shrank
                # and ended 10 minutes early when the other jobs stopped)
                log("re-planned: total %d -> %d" % (total, want))
                total = want
        if auto and a.procs > 1:
            total = procs.broadcast_int(total)  # rank 0's clock decides
        if a.purge_every and step % a.purge_every == 0 and jemalloc:
            before = rss_mib()
            ok = jemalloc_purge()
            if step == a.purge_every:
                log("jemalloc purge %s: rank 0 rss %d -> %d MiB" % (
                    "done" if ok else "FAILED", before, rss_mib()))
        if step % 50 == 0:
            el = now - t_loop
            rss = procs.gather_ints(rss_mib())
            log("step %d/%s loss %.4f ema %.4f lr %.2e gn %.2f | %.0f tok/s, %.1f min | "
                "rss %s MiB%s" % (
                    step, total if total < 10 ** 9 else "?", loss_v, ema or 0.0, lr, float(gn),
                    (seen_tok - tok0) / el, el / 60, "/".join(map(str, rss)),
                    " | copy batches %d, copy ema %.3f" % (n_copy, copy_ema) if n_copy else ""))
        if a.procs > 1 and step % 2000 == 0 and not procs.same_weights(params):
            raise SystemExit("--procs: the processes' weights differ at step %d" % step)
        # every rank takes part (its noise stream goes into the checkpoint); rank 0's clock
        # decides when. A file WORK/STOP stops the run after a checkpoint (--resume goes on).
        if step % 50 == 0 or step == a.stop_at:
            stop_file = os.path.join(a.work, "STOP")
            want = 0  # 1: checkpoint, 2: checkpoint and stop
            if rank == 0:
                want = (2 if step == a.stop_at or os.path.exists(stop_file)
                        else int(now - t_ckpt >= a.ckpt_every_s))
            due = procs.broadcast_int(want)
            if due:
                t_ckpt = now
                nstates = procs.gather_obj(nrng.bit_generator.state)
                if rank == 0:
                    save_ckpt(nstates)
                    export(model, cfg, tok, os.path.join(a.work, "latest"))
                    log("checkpoint at step %d -> %s/ckpt.pt, %s/latest" % (step, a.work,
                                                                          a.work))
                if due == 2:
                    procs.close()
                    if rank == 0 and os.path.exists(stop_file):
                        os.remove(stop_file)
                    log("stopped at step %d (%s); the same command with --resume goes on" % (
                        step, "--stop-at" if step == a.stop_at else stop_file))
                    return
                procs.sum_(torch.zeros(1))
    if not procs.same_weights(params):
        raise SystemExit("--procs: the processes' weights differ at the end")
    nstates = procs.gather_obj(nrng.bit_generator.state)
    procs.close()
    if rank != 0:
        return
    wall = elapsed0 + time.time() - t_start
    meta = {"steps": step, "train_wall_s": round(wall, 1), "params": nparam, "copy_batches": n_copy,
            "tokens_seen": seen_tok, "final_loss_ema": round(ema, 4), "args": vars(a)}
    save_ckpt(nstates)
    export(model, cfg, tok, os.path.join(a.work, "latest"), meta)
    export(model, cfg, tok, a.export, meta)
    if w_avg is not None:
        raw = [p.detach().clone() for p in params]
        for name, ws, on in (("avg", w_avg, a.avg_from > 0), ("ema", w_ema, a.ema > 0)):
            if not on:
                continue
            with torch.no_grad():
                for p, q in zip(params, ws):
                    p.copy_(q)
            m2 = dict(meta, weights=name, avg_from_step=avg_start, avg_steps=n_avg)
            export(model, cfg, tok, os.path.join(a.work, "export-" + name), m2)
            log("exported the %s weights (steps %d-%d) to %s/export-%s" % (
                name, avg_start, step, a.work, name))
        with torch.no_grad():
            for p, q in zip(params, raw):
                p.copy_(q)
    log("done: %d steps, %.1f min total; exported to %s" % (step, (time.time() - t_start) / 60,
                                                           a.export))


if __name__ == "__main__":
    main()
