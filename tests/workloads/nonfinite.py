"""A model that produces a NaN in its second forward, two levels down: for
--stop-on-nonfinite. Its parent and the model are still open when the culprit returns,
so the trace ends with the error at the parent and both frames unwound. The work
prints when it ends, so that a test can tell the target ran to its end after kill -CONT.
"""
import sys

import torch
from torch import nn


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)          # log of a negative value: NaN


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.log = Log()

    def forward(self, x):
        return self.log(self.lin(x).abs() - self.shift)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


def build():
    return Model()


def run(model):
    for shift in (-1.0, 1000.0, -1.0):
        model.block.shift = shift
        model(torch.randn(2, 4))
    print("work done", flush=True)
    sys.stderr.write("work done\n")
