"""Reference block-diffusion decoding for parity tests: plain, slow and obvious.

Every forward recomputes the whole sequence (prompt + every block so far) with the block-causal
mask, so no KV cache, page or scheduler logic is shared with the C engine. One block at a time.
Each family follows its authors' published loop, re-derived from their code (not from fogline's):

SDAR (JetAstra/SDAR generate.py, `block_diffusion_generate`): the prompt's whole blocks are
prefilled; the prompt's last partial block is the first generation block, its prompt positions
kept. Per step one forward over the block; `low_confidence_dynamic` with steps == block length
(quota one per step): commit every masked position with p > threshold, or the single most
confident when none is (policy "threshold"); "sequential" commits the most confident one. When
the block has no mask, one more forward stores its KV. Generation stops after a block that
holds an end token; the reply ends before the first end token, and at max_tokens (positions
past max_tokens inside the last block are denoised with the rest of the block: they take part
in its decisions).

Fast-dLLM v2 (its Hugging Face modeling.py `generate`, the loop of NVlabs/Fast-dLLM v2/):
- The prompt's whole blocks are prefilled. When the prompt ends exactly on a block boundary,
  the argmax of the prefill's last row is appended at once as the next block's first token (an
  autoregressive step) and only the remaining B-1 positions start masked.
  (Upstream prefills only when the prompt is longer than one block, so a prompt of exactly one
  block is decoded there without seeing itself: a defect fogline does not reproduce. Here and
  in fogline such a prompt is prefilled like any other boundary prompt.)
- Logits are shifted: position p is predicted from row p-1 of a forward over the block.
- The block's sub-blocks (8) are finished strictly left to right: a sub-block is denoised until
  it has no mask; each step commits {p > threshold} plus the most confident masked position
  (strict '>', the forced top-1; "sequential" commits only the top-1).
- Before each step: if the first end token after the block's start has no mask before it, the
  block (and the reply) ends there; positions after it are never decoded.
- A block with no mask left is run once more to store its KV; the argmax of that forward's last
  row is appended as the next block's first token, committed unconditionally (argmax even when
  sampling). A reply stops before the next block when an end token is among its tokens.
- max_tokens: upstream counts whole blocks (max_new_tokens // 32); fogline's max_tokens is the
  OpenAI limit on reply tokens. Blocks are causal, so the reply truncated to max_tokens is a
  prefix of the untruncated one: this reference decodes block by block until max_tokens reply
  positions exist, then truncates. Positions past max_tokens in the last block are decoded as
  upstream would (they take part in their sub-block's decisions).

LLaDA2.0 (the authors' `generate` in modeling_llada2_moe.py, the Hugging Face repo
inclusionAI/LLaDA2.0-mini; SGLang's LowConfidence is its steady state):
- Defaults: block 32, steps 32, threshold 0.95, minimal_topk 1, greedy = argmax with p its
  softmax probability (temperature 1). No logits shift; no KV cache (every step recomputes the
  window up to the current block's end).
- The prompt's whole blocks are context; its partial last block is the first block decoded,
  its prompt positions fixed.
- Per block a fixed schedule of quotas: s = min(steps, gen_length // minimal_topk) steps,
  step i gets block // s positions, one more in the first block % s steps (they sum to the
  block). A step commits every masked position with p > threshold if there are at least the
  quota of them, else the quota's most confident. With steps 32 and a block of 32 the quota
  is 1 at every step (SGLang's rule: all above the threshold, else the single most
  confident); a reply shorter than 32 tokens (gen_length < steps) gets fewer, larger steps:
  gen_length 10 gives quotas 4, 4, 3, 3, 3, 3, 3, 3, 3, 3.
- After a block, generation stops when an end token is among the reply's positions so far;
  the reply is cut before the first end token and at gen_length (the last block is decoded
  whole: its positions past gen_length take part).

LLaDA2.1 (the authors' `generate` in LLaDA2.1's modeling_llada2_moe.py, as copied in
lingjiechen2/dllm `dllm/pipelines/llada21/models/modeling_llada21_moe.py`; SGLang's
JointThreshold gives the same tokens): token-to-token editing beside mask-to-token unmasking.
- Each step of a block: M2T commits the masked positions with p > threshold, else the single
  most confident (num_to_transfer 1; the steps schedule is not used); T2T rewrites every
  position that was decided before this step and is not a prompt position, whose argmax
  differs from its token with p > editing_threshold. Both from one forward, applied together.
- A step that starts with no mask in the block is post step k (k = 1, 2, ...); the block ends
  before post step max_post_steps + 1 is run, or after a post step that edited nothing.
  Only the current block is edited; earlier blocks are final.
- Stop and cut as LLaDA2.0 (eos_early_stop: after a block that holds an end token).
"""
import torch


def _logits(model, x):
    logits, _ = model(torch.tensor([x]))
    return torch.softmax(logits[0].double(), dim=-1)


def _pick(policy, cand, pred, threshold):
    order = sorted(cand, key=lambda p: (-pred[p][0], p))
    if policy == "sequential":
        return order[:1]
    if policy == "threshold":
        return [p for p in order if pred[p][0] > threshold] or order[:1]
    raise ValueError(policy)


def _commit(tok, mask_id):
    # upstream tells masks by their id: a committed mask token would stay "masked" there and
    # be predicted again, where fogline keeps it decided; a test model must not produce one
    if tok == mask_id:
        raise RuntimeError("the model predicted the mask token itself; pick another seed")
    return tok


def _reply(x, L, max_tokens, mask_id, eos_ids):
    reply = []
    for t in x[L:L + max_tokens]:
        if t in eos_ids:
            break
        assert t != mask_id, "a masked position inside the reply"
        reply.append(t)
    return reply


@torch.no_grad()
def generate_sdar(model, prompt, max_tokens, mask_id, eos_ids, policy="sequential",
                  threshold=0.9):
    B = model.c.block_size
    L = len(prompt)
    limit = L + max_tokens
    x = list(prompt)
    start = (L // B) * B
    forwards = 0
    while start < limit:
        x = x + [mask_id] * (start + B - len(x))
        while True:
            cand = [p for p in range(start, start + B) if x[p] == mask_id]
            if not cand:
                break
            probs = _logits(model, x)
            forwards += 1
            pred = {}
            for p in cand:
                conf, tok = probs[p].max(dim=-1)
                pred[p] = (float(conf), int(tok))
            for p in _pick(policy, cand, pred, threshold):
                x[p] = _commit(pred[p][1], mask_id)
        forwards += 1  # the store forward
        if any(t in eos_ids for t in x[max(start, L):start + B]):
            break
        start += B
    return _reply(x, L, max_tokens, mask_id, eos_ids), forwards


def _first_stop_clear(x, lo, hi, mask_id, eos_ids):
    """True when the first end token in x[lo:hi] has no mask before it (from lo)."""
    for p in range(lo, hi):
        if x[p] in eos_ids:
            return True
        if x[p] == mask_id:
            return False
    return False


@torch.no_grad()
def generate_fastdllm(model, prompt, max_tokens, mask_id, eos_ids, policy="threshold",
                      threshold=0.9, sub_block=8):
    B = model.c.block_size
    L = len(prompt)
    x = list(prompt)
    forwards = 0
    if L % B == 0:
        probs = _logits(model, x)  # the prefill
        forwards += 1
        x.append(int(probs[L - 1].argmax()))
    elif L > B:
        forwards += 1  # upstream's prefill of the whole blocks (recomputed here every forward)
    while len(x) - L < max_tokens and not any(t in eos_ids for t in x[L:]):
        lo = len(x)  # the block's first masked position ("prompt_length" upstream)
        start = (lo // B) * B
        end = start + B
        x = x + [mask_id] * (end - lo)
        while True:
            if _first_stop_clear(x, lo, end, mask_id, eos_ids):
                break
            masked = [p for p in range(start, end) if x[p] == mask_id]
            if not masked:
                probs = _logits(model, x)  # the store forward
                forwards += 1
                x.append(int(probs[end - 1].argmax()))
                break
            s0 = start + ((masked[0] - start) // sub_block) * sub_block
            cand = [p for p in masked if p < s0 + sub_block]
            probs = _logits(model, x)
            forwards += 1
            pred = {}
            for p in cand:
                conf, tok = probs[p - 1].max(dim=-1)
                pred[p] = (float(conf), int(tok))
            for p in _pick(policy, cand, pred, threshold):
                x[p] = _commit(pred[p][1], mask_id)
    return _reply(x, L, max_tokens, mask_id, eos_ids), forwards


def steps_schedule(block, steps, gen_length, minimal_topk=1):
    """LLaDA2.0's quotas per step of a block (the authors' _get_num_transfer_tokens, with
    steps capped at gen_length // minimal_topk)."""
    s = min(steps, gen_length // minimal_topk)
    return [block // s + (1 if i < block % s else 0) for i in range(s)]


def _block_of(model, block):
    return block if block else model.c.block_size


def _ended(x, L, end, eos_ids):
    return any(t in eos_ids for t in x[L:end])


@torch.no_grad()
def generate_llada2(model, prompt, max_tokens, mask_id, eos_ids, threshold=0.95, steps=32,
                    block=None):
    """LLaDA2.0. Returns (reply, forwards)."""
    B = _block_of(model, block)
    L = len(prompt)
    limit = L + max_tokens
    quotas = steps_schedule(B, steps, max_tokens)
    x = list(prompt) + [mask_id] * (-(-limit // B) * B - L)
    forwards = 0
    start = (L // B) * B
    while start < limit:
        for quota in quotas:
            masked = [p for p in range(start, start + B) if x[p] == mask_id]
            if not masked:
                break
            probs = _logits(model, x[:start + B])
            forwards += 1
            pred = {}
            for p in masked:
                conf, tok = probs[p].max(dim=-1)
                pred[p] = (float(conf), int(tok))
            above = [p for p in masked if pred[p][0] > threshold]
            if len(above) >= quota:
                take = above
            else:
                take = sorted(masked, key=lambda p: (-pred[p][0], p))[:min(quota, len(masked))]
            for p in take:
                x[p] = _commit(pred[p][1], mask_id)
        assert mask_id not in x[start:start + B], "the schedule left a mask"
        if _ended(x, L, start + B, eos_ids):
            break
        start += B
    return _reply(x, L, max_tokens, mask_id, eos_ids), forwards


@torch.no_grad()
def generate_llada21(model, prompt, max_tokens, mask_id, eos_ids, threshold=0.7,
                     edit_threshold=0.5, max_post_steps=16, block=None):
    """LLaDA2.1 with token editing. Returns (reply, forwards, counts): counts has "edits"
    (tokens rewritten), "post_steps" (forwards of a block with no mask left) and
    "capped_blocks" (blocks that ran all max_post_steps post steps, so the cap ended them)."""
    B = _block_of(model, block)
    L = len(prompt)
    limit = L + max_tokens
    x = list(prompt) + [mask_id] * (-(-limit // B) * B - L)
    forwards = 0
    counts = {"edits": 0, "post_steps": 0, "capped_blocks": 0}
    start = (L // B) * B
    while start < limit:
        post = 0
        while True:
            masked = [p for p in range(start, start + B) if x[p] == mask_id]
            if not masked:
                post += 1
            if post > max_post_steps:
                counts["capped_blocks"] += max_post_steps > 0
                break
            probs = _logits(model, x[:start + B])
            forwards += 1
            pred = {}
            for p in range(start, start + B):
                conf, tok = probs[p].max(dim=-1)
                pred[p] = (float(conf), int(tok))
            take = []
            if masked:
                take = [p for p in masked if pred[p][0] > threshold]
                if not take:
                    take = sorted(masked, key=lambda p: (-pred[p][0], p))[:1]
            edits = [p for p in range(max(start, L), start + B)
                     if x[p] != mask_id and pred[p][0] > edit_threshold and pred[p][1] != x[p]]
            for p in take + edits:
                # an edit into the mask token would re-mask the position upstream; fogline
                # never re-masks, so a test model must not do it
                x[p] = _commit(pred[p][1], mask_id)
            counts["edits"] += len(edits)
            counts["post_steps"] += not masked
            if not masked and not edits:
                break
        if _ended(x, L, start + B, eos_ids):
            break
        start += B
    return _reply(x, L, max_tokens, mask_id, eos_ids), forwards, counts


def generate(model, prompt, max_tokens, mask_id, eos_ids, policy="sequential", threshold=0.9,
             fastdllm=False, sub_block=8):
    if fastdllm:
        return generate_fastdllm(model, prompt, max_tokens, mask_id, eos_ids, policy, threshold,
                                 sub_block)
    return generate_sdar(model, prompt, max_tokens, mask_id, eos_ids, policy, threshold)
