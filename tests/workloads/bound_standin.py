"""bound_calls.py's call shapes on the stand-in torch (tests/standin: nn.Module only, no
tensors): `model.__call__(x)`, a stored bound method with positional args and with
**kwargs, one that raises inside a child and is caught, and ordinary calls around them;
the values are plain lists and floats. BOUND_SHAPE picks one (default: all)."""
import os

from torch import nn


class Scale(nn.Module):
    def forward(self, x, by=2.0):
        return [v * by for v in x]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = Scale()
        self.act = nn.Identity()

    def forward(self, x, fail=False):
        if fail:
            raise ValueError("a step that fails")
        return self.act(self.proj(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = Scale()
        self.block = Block()
        self.head = Scale()

    def forward(self, x, scale=1.0, fail=False):
        return self.head(self.block([v * scale for v in self.embed(x)], fail=fail), by=0.5)


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
    x = [1.0, 2.0, 3.0]
    shape = os.environ.get("BOUND_SHAPE", "all")
    model(x)
    for name, work in (("dunder", dunder), ("kwargs", kwargs), ("positional", positional),
                       ("raises", raises)):
        if shape in (name, "all"):
            work(model, x)
    model(x)
