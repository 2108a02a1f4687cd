"""Leaf calls whose length straddles the time the collector waits before it takes a kept
enter itself (20 ms, session/defer.c), on four threads at once: each call's enter is sent
with its exit as one record, or on its own because another thread made a record first,
or taken by the collector while the call runs, sometimes right as the call returns. Each
thread calls its own block (`blocks.K`), whose leaf sleeps 5-40 ms (a seeded draw per
thread, so each thread's calls are the same in every run) between two quick leaves."""
import random
import threading
import time

import torch
from torch import nn

THREADS = 3
CALLS = 16


class Nap(nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.rng = random.Random(seed)

    def forward(self, x):
        time.sleep(self.rng.uniform(0.005, 0.120))
        return x + 1


class Block(nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.nap = Nap(seed)
        self.out = nn.ReLU()

    def forward(self, x):
        return self.out(self.nap(self.inp(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(k) for k in range(THREADS))

    def forward(self, x):
        return x


def build():
    return Model()


def run(model):
    model(torch.ones(1, 4))  # the model's first call: its tree is read

    def work(k):
        x = torch.ones(1, 4)
        for _ in range(CALLS):
            model.blocks[k](x)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
