"""A small nested model and a deterministic forward loop, for the fault tests
(tests/test_faults_*.py). As a run_workload.py workload, env knobs:

    FAULT_FORWARDS=N        forwards to run (default 40)
    FAULT_DIE=segv|exit|raise   die inside blocks.1.inner during forward FAULT_AT (default 3):
                            a segfault in native code (ctypes.string_at(0)), os._exit(3),
                            an uncaught exception
    FAULT_SECONDS=S         run forwards for S seconds instead of N (soak), then print
                            "forwards N" on stderr
    FAULT_UNTIL=FILE        with FAULT_SECONDS: stop as soon as FILE exists (S is then
                            the longest it runs), so a test waits for what it watches
                            rather than for a machine's speed
"""
import ctypes
import os
import sys
import time

import torch
from torch import nn


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.forward_no = 0
        self.index = 0

    def forward(self, x):
        die = os.environ.get("FAULT_DIE")
        if die and self.index == 1 and self.forward_no == int(os.environ.get("FAULT_AT", "3")):
            sys.stderr.flush()
            if die == "segv":
                ctypes.string_at(0)
            elif die == "exit":
                os._exit(3)
            elif die == "raise":
                raise RuntimeError("inner failed on purpose")
        return self.act(self.lin(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.inner = Inner()

    def forward(self, x):
        return x + self.inner(self.norm(x))


class Model(nn.Module):
    def __init__(self, blocks=3):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks))
        for index, block in enumerate(self.blocks):
            block.inner.index = index
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            block.inner.forward_no = self.forward_no
            x = block(x)
        self.forward_no += 1
        return self.head(x)


MODULES_PER_FORWARD = 1 + 1 + 3 * (1 + 1 + 1 + 2) + 1  # root, embed, blocks, head


def build():
    model = Model()
    model.forward_no = 0
    return model


def inputs(step):
    return torch.full((2, 4), float(step % 7) / 7.0)


def run(model):
    seconds = float(os.environ.get("FAULT_SECONDS", "0"))
    if seconds:
        deadline, n = time.monotonic() + seconds, 0
        until = os.environ.get("FAULT_UNTIL")
        while time.monotonic() < deadline and not (until and os.path.exists(until)):
            for _ in range(50):
                model(inputs(n))
                n += 1
        print(f"forwards {n}", file=sys.stderr, flush=True)
        return
    total = 0.0
    for step in range(int(os.environ.get("FAULT_FORWARDS", "40"))):
        total += float(model(inputs(step)).sum())
    print(f"checksum {total:.6f}", file=sys.stderr, flush=True)
