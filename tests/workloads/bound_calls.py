"""Modules called through their bound __call__, which passes through no slot_tp_call:
`model.__call__(x)`, a stored bound method with positional args and with **kwargs (as
transformers' generate() calls its model for each decoding step), one that raises inside
a child and is caught, and ordinary calls around them. BOUND_SHAPE picks one (default:
all, one call site each: see docs/design.md on debug registers)."""
import os

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x, fail=False):
        if fail:
            raise ValueError("a step that fails")
        return self.act(self.proj(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.block = Block()
        self.head = nn.Linear(4, 2)

    def forward(self, x, scale=1.0, fail=False):
        return self.head(self.block(self.embed(x) * scale, fail=fail))


def build():
    return Model()


def dunder(model, x):
    for _ in range(3):
        model.__call__(x)


def kwargs(model, x):
    step = model.__call__
    for i in range(3):
        inputs = {"x": x, "scale": 0.5 * i}
        out = step(**inputs)
    return out


def positional(model, x):
    step = model.__call__
    for _ in range(3):
        step(x)


def raises(model, x):
    step = model.__call__
    for i in range(3):
        try:
            step(x, 1.0, i == 1)
        except ValueError:
            pass


def run(model):
    x = torch.ones(2, 3)
    shape = globals().get("SHAPE") or os.environ.get("BOUND_SHAPE", "all")
    model(x)
    for name, work in (("dunder", dunder), ("kwargs", kwargs), ("positional", positional),
                       ("raises", raises)):
        if shape in (name, "all"):
            work(model, x)
    model(x)
