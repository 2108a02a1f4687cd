"""Module classes that run a __call__ of their own: one that calls Module.__call__
(`super().__call__(x)`, as a subclass typing its call does), one through
`self._call_impl(x)`, and one that bypasses it (`self.forward(x)`: torch runs none of its
hooks, so the in-process tracer writes no call of it, and its children are its caller's).
The model is torch's (nn.Linear) when torch offers it, else the stand-in's."""
import torch
from torch import nn

REAL = hasattr(nn, "Linear")


class Scale(nn.Module):
    def forward(self, x):
        return [v * 2.0 for v in x]


def linear():
    return nn.Linear(4, 4) if REAL else Scale()


class Typed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = linear()

    def __call__(self, x):
        return super().__call__(x)

    def forward(self, x):
        return self.lin(x)


class Impl(Typed):
    def __call__(self, x):
        return self._call_impl(x)


class Bypass(Typed):
    def __call__(self, x):
        return self.forward(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.typed = Typed()
        self.impl = Impl()
        self.bypass = Bypass()
        self.head = linear()

    def forward(self, x):
        return self.head(self.bypass(self.impl(self.typed(x))))


def build():
    return Model()


def run(model):
    x = torch.ones(2, 4) if REAL else [1.0, 2.0, 3.0, 4.0]
    for _ in range(3):
        model(x)
