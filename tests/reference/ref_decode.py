"""Reference block-diffusion decoding for parity tests: plain, slow and obvious.

Every step recomputes the whole sequence (prompt + every block so far) with the block-causal
mask, so no KV cache, page or scheduler logic is shared with the C engine. One block at a
time; the prompt's last partial block is the first generation block. Policies: sequential
(the most confident masked position per step) and threshold (all above t, at least one).
Fast-dLLM v2 layouts read position p's prediction from p-1 (shifted logits) and denoise
sub-blocks left to right. The reply ends at the first end token of a finished block, or at
max_tokens; positions past max_tokens inside the last block are still denoised (as the engine
does) but not returned."""
import torch


@torch.no_grad()
def generate(model, prompt, max_tokens, mask_id, eos_ids, policy="sequential", threshold=0.9,
             shift=0, sub_block=None):
    B = model.c.block_size
    sub = sub_block or B
    L = len(prompt)
    limit = L + max_tokens
    x = list(prompt)
    start = (L // B) * B
    reply = []
    forwards = 0
    while start < limit:
        x = x[:start + B] + [mask_id] * (start + B - len(x))
        while True:
            masked = [p for p in range(start, start + B) if x[p] == mask_id and p >= L]
            if not masked:
                break
            # the first sub-block with masks
            lo = start + ((masked[0] - start) // sub) * sub
            cand = [p for p in masked if lo <= p < lo + sub]
            logits, _ = model(torch.tensor([x]))
            forwards += 1
            probs = torch.softmax(logits[0].double(), dim=-1)
            pred = {}
            for p in cand:
                pr = probs[p - shift]
                conf, tok = pr.max(dim=-1)
                pred[p] = (float(conf), int(tok))
            order = sorted(cand, key=lambda p: (-pred[p][0], p))
            if policy == "sequential":
                pick = order[:1]
            elif policy == "threshold":
                pick = [p for p in order if pred[p][0] > threshold] or order[:1]
            else:
                raise ValueError(policy)
            for p in pick:
                x[p] = pred[p][1]
        ended = False
        for p in range(max(start, L), start + B):
            if p >= limit:
                ended = True
                break
            if x[p] in eos_ids:
                ended = True
                break
            reply.append(x[p])
        if ended:
            break
        start += B
    return reply, forwards
