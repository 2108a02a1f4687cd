"""Two threads inside module calls at once, for evmbpf dump: a worker thread in the
model's `side` block (called on its own, not through the model), the main thread in the
model's second layer (midforward.py's Pause: MIDFORWARD_FLAG is created when it pauses,
which is once the worker is waiting too). Both go on when MIDFORWARD_RESUME exists
(MIDFORWARD_PAUSE seconds at most)."""
import os
import sys
import threading
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from midforward_any import Pause  # noqa: E402


class Wait(nn.Module):
    def __init__(self):
        super().__init__()
        self.entered = threading.Event()

    def forward(self, x, scale=1.0):
        self.entered.set()
        resume = os.environ.get("MIDFORWARD_RESUME", "")
        deadline = time.monotonic() + float(os.environ.get("MIDFORWARD_PAUSE", "3"))
        while resume and not os.access(resume, os.F_OK) and time.monotonic() < deadline:
            time.sleep(0.01)
        return x * scale


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.wait = Wait()

    def forward(self, x):
        return self.wait(self.proj(x), scale=2.0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), Pause(), nn.ReLU()])
        self.side = Block()

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def build():
    return Model()


def run(model):
    worker = threading.Thread(target=model.side, args=(torch.ones(2, 3),), name="side-worker")
    worker.start()
    model.side.wait.entered.wait(60)
    model(torch.ones(1, 4))
    worker.join()
