"""A forward that pauses in its second layer the first time, so a tracer can attach in
the middle of it. Set MIDFORWARD_FLAG to a path: it is created when the pause begins.
The pause lasts MIDFORWARD_PAUSE seconds (3 by default), or, with MIDFORWARD_RESUME set
to a path, until that file exists (MIDFORWARD_PAUSE seconds at most)."""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from midforward_any import Pause  # noqa: E402  (the pause, with its environment knobs)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), Pause(), nn.Linear(4, 4), nn.ReLU()])
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build():
    return Model()


def run(model):
    for _ in range(3):
        model(torch.ones(1, 4))
