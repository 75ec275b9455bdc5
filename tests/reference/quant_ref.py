"""The reference for fogline's q8/q4 weights: the PyTorch model of fogline_ref.py with every
projection computed as the CPU backend's quantized kernels specify it, written from the
specification (engine/qformat.h for the weights, engine/cpu/quant.h and kernels.h for the
activations), not from the C code:

  weights, per row and group of 32 (qformat.h):
    q8: d = the smallest f16 >= max|w| / 127 (at least the smallest subnormal when max|w| > 0),
        q = round_half_even(w / d) clamped to [-127, 127], w' = d * q;
    q4: m = the first value of largest magnitude, d = -(the smallest f16 >= |m| / 8) when m > 0,
        else +that, q = round_half_even(w / d) clamped to [-8, 7], w' = d * q;
  activations (the input rows of each projection), per row and group of 32:
    dx = max|x| / 127 in f32, q = round_half_even(x / dx) clamped to [-127, 127] (0 when
    dx = 0), x' = dx * q;
  y = x' . w' (accumulated here in float64; the kernels' exact int32 group sums differ from it
  only by the f32 rounding of the group scale products and sums).

The embedding and the LM head are q8 in both modes (the backend's choice, docs/models.md): an
embedding row is looked up as its q8 dequantization. Biases are added after the product, as
the backend does."""
import torch
import torch.nn as nn

QG = 32


def f16_up(a):
    """The smallest f16 >= a (a >= 0, finite in f16), as float32."""
    h = a.to(torch.float16)
    low = h.float() < a
    bits = h.view(torch.int16) + low.to(torch.int16)
    return bits.view(torch.float16).float()


def quantize_weight(w, bits):
    """w (n, k) float -> the dequantized q8/q4 weights, float32, as the quantizer writes them."""
    n, k = w.shape
    assert k % QG == 0
    g = w.float().reshape(n, k // QG, QG)
    if bits == 8:
        amax = g.abs().amax(dim=-1, keepdim=True)
        d = f16_up(amax / 127.0)
        tiny = (d == 0) & (amax > 0)
        d = torch.where(tiny, torch.full_like(d, 2.0 ** -24), d)
        q = torch.where(d > 0, torch.round(g / torch.where(d > 0, d, torch.ones_like(d))),
                        torch.zeros_like(g)).clamp(-127, 127)
    else:
        idx = g.abs().argmax(dim=-1, keepdim=True)  # the first of the largest magnitude
        m = g.gather(-1, idx)
        d = f16_up(m.abs() / 8.0)
        tiny = (d == 0) & (m != 0)
        d = torch.where(tiny, torch.full_like(d, 2.0 ** -24), d)
        d = torch.where(m > 0, -d, d)
        q = torch.where(d != 0, torch.round(g / torch.where(d != 0, d, torch.ones_like(d))),
                        torch.zeros_like(g)).clamp(-8, 7)
    return (d * q).reshape(n, k)


def quantize_rows(x):
    """x (..., k) -> the activations as the kernels see them, float32."""
    k = x.shape[-1]
    g = x.float().reshape(*x.shape[:-1], k // QG, QG)
    dx = g.abs().amax(dim=-1, keepdim=True) / 127.0
    safe = torch.where(dx > 0, dx, torch.ones_like(dx))
    q = torch.where(dx > 0, torch.round(g / safe).clamp(-127, 127), torch.zeros_like(g))
    return (q * dx).reshape(x.shape)


class QLinear(nn.Module):
    def __init__(self, lin, bits):
        super().__init__()
        self.w = quantize_weight(lin.weight.detach(), bits).double()
        self.b = None if lin.bias is None else lin.bias.detach().float()

    def forward(self, x):
        y = (quantize_rows(x).double() @ self.w.t()).float()
        return y if self.b is None else y + self.b


def quantize_model(m, bits):
    """m (fogline_ref.Model) with its projections and head as q8 (bits 8) or q4 (bits 4)
    weights: changes m in place and returns it."""
    for layer in m.model.layers:
        a, p = layer.self_attn, layer.mlp
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(a, name, QLinear(getattr(a, name), bits))
        for name in ("gate_proj", "up_proj", "down_proj"):
            setattr(p, name, QLinear(getattr(p, name), bits))
    w = m.model.embed_tokens.weight if m.c.tie else m.lm_head.weight
    head_w = quantize_weight(w.detach(), 8).double()  # the head is q8 in both modes
    with torch.no_grad():  # so is the embedding (after the head took the tied original)
        m.model.embed_tokens.weight.copy_(quantize_weight(m.model.embed_tokens.weight, 8))
    m.head = lambda h: (quantize_rows(h).double() @ head_w.t()).float()
    return m
