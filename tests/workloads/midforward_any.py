"""A forward that pauses in its second layer the first time, so that a tracer can attach
in the middle of it, on any torch, the stand-in too (nn.Module, nn.ModuleList and
nn.Identity only, called with ints; midforward.py has real layers around the same Pause).
Set MIDFORWARD_FLAG to a path: it is created when the pause begins. The pause lasts
MIDFORWARD_PAUSE seconds (3 by default), or, with MIDFORWARD_RESUME set to a path, until
that file exists (MIDFORWARD_PAUSE seconds at most)."""
import os
import time

from torch import nn


class Pause(nn.Module):
    def __init__(self):
        super().__init__()
        self.paused = False

    def forward(self, x):
        if not self.paused:
            self.paused = True
            flag = os.environ.get("MIDFORWARD_FLAG")
            if flag:
                open(flag, "w").close()
            pause = float(os.environ.get("MIDFORWARD_PAUSE", "3"))
            resume = os.environ.get("MIDFORWARD_RESUME")
            if resume:  # until that file exists, MIDFORWARD_PAUSE seconds at most
                deadline = time.monotonic() + pause
                while not os.access(resume, os.F_OK) and time.monotonic() < deadline:
                    time.sleep(0.01)
            else:
                time.sleep(pause)
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Identity(), Pause(), nn.Identity(), nn.Identity()])
        self.head = nn.Identity()

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build():
    return Model()


def run(model):
    for i in range(3):
        model(i)
