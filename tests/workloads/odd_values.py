"""Odd values handed to modules and returned by them: what _describe must get right.

Big and negative ints, floats that need repr (1.0, 1e-05, nan, inf), long and non-ASCII
strings, containers deeper than 2 and wider than 8, namedtuples and OrderedDicts,
non-contiguous, empty, 0-dim and 6-dim tensors, several dtypes, a caught exception.
"""
import collections

import torch
from torch import nn

Pair = collections.namedtuple("Pair", "left right")


class Echo(nn.Module):
    def forward(self, *args, **kwargs):
        return args[0] if args else None


class Picky(nn.Module):
    def forward(self, x):
        raise ValueError("picky")


class OddConfig:
    model_type = "odd"     # a class attribute, as transformers' configs keep it


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = OddConfig()
        self.echo = Echo()
        self.lin = nn.Linear(4, 4)
        self.picky = Picky()
        self.shared = self.lin          # reachable twice: keeps its first name

    def forward(self, x):
        e = self.echo
        e(2 ** 200, -(3 ** 90), 0, -1, True, False, None)
        e(1.0, 1e-05, 1e16, -0.0, float("nan"), float("inf"), float("-inf"), 0.1)
        e("x" * 100, "naïve ☃ 𝄞 text", "", "quote\"back\\slash\nnewline")
        e([[[1, 2], [3]], (4, 5)], tuple(range(12)), list(range(9)))
        e({"a": {"b": {"c": 1}}, 3: "int key", "t": x}, collections.OrderedDict(z=1, y=2))
        e(Pair(x, 2), Pair(left=[1], right={"k": None}))
        e(x.t(), x[:, 1:3], torch.empty(0, 3), torch.tensor(3.5), torch.zeros(1, 2, 1, 2, 1, 2))
        e(x.to(torch.float64), x.to(torch.int64), x > 0, x.to(torch.bfloat16), x.half())
        e(x, scale=0.5, mask=None, name="kw", opts={"deep": [1, [2, [3]]]})
        e(object(), nn.ReLU, print)
        try:
            self.picky(x)
        except ValueError:
            pass
        y = self.lin(x)
        return Pair(y, {"logits": y, "n": 3})


def build():
    return Model()


def run(model):
    for _ in range(2):
        model(torch.ones(2, 4))
