"""phases_any.py's phase markers (nested, left by exceptions, re-entered in a hook) on
real layers and tensors: nn.Linear and nn.LayerNorm around the failing module."""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import phases_any  # noqa: E402


def build():
    return phases_any.build(phases_any.Model(nn.Linear(4, 4), nn.LayerNorm(4)))


def run(model):
    phases_any.run(model, torch.ones(2, 4))
