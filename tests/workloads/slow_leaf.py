"""A leaf module call that lasts: `slow` (no submodule) writes the file SLOW_FLAG as it
starts, then waits until SLOW_RESUME exists (60 s at most) before it returns. Two
forwards; the second one's `slow` waits."""
import os
import time

import torch
from torch import nn


class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:
            open(os.environ["SLOW_FLAG"], "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.environ["SLOW_RESUME"]) and time.monotonic() < deadline:
                time.sleep(0.01)
        return x * 2


def build():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Slow())


def run(model):
    for _ in range(2):
        model(torch.ones(1, 4))
