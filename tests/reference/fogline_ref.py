"""The PyTorch reference the parity tests compare the C engine with: the definition of fogline's
models that training uses, engine/train/fogline_model.py (tests may import product code, never the
reverse). It shares no code with the C engine, which is the independence parity needs.

Covers the two layouts fogline serves: Qwen3 (per-head q_norm/k_norm, no qkv bias: SDAR and our
default model) and Qwen2 (q/k/v bias: Fast-dLLM v2); block-causal attention; float32."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine",
                                "train"))
from fogline_model import *  # noqa: E402,F401,F403
