"""Safetensors reading and writing for the tests: engine/train/safetensors_io.py (Debian has no
safetensors package), the product side's, which the tests import (never the reverse)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "engine",
                                "train"))
from safetensors_io import load, save  # noqa: E402,F401
