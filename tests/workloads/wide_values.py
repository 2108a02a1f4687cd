"""Values whose description takes more than one read of a container (bpf/values.bpf.h's
head and windows): root args and kwargs wider than a window, a tuple wider than its head,
dicts with deleted entries, a dict grown past its first table, tuple keys (and tuples in them,
at any depth), strings and ints just past the head, a KV-cache-like object with many attributes."""
import torch
from torch import nn


class Echo(nn.Module):
    def forward(self, *args, **kwargs):
        return args[0] if args else None


class Many:
    def __init__(self):
        for i in range(40):
            setattr(self, f"attr_{i}", i)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.echo = Echo()

    def forward(self, x):
        e = self.echo
        e(*range(30))                                      # args past the head and a window
        e(**{f"key_{i:02d}": i for i in range(30)})        # kwargs past a window
        e(x, tuple(range(30)), tuple([x] * 9))             # tuples past the head
        holes = {f"h{i}": i for i in range(30)}
        for i in range(0, 30, 3):
            del holes[f"h{i}"]                             # deleted entries
        e(holes, {(1, "a"): 1, (2, 3.5): x, ("k",) * 3: None})
        e({(2, (3, 4)): x, ((1, (2, ("a", None))),): 1, ((),): 3, (1.5, (True, -7)): 4})  # tuples in keys
        big = {}
        for i in range(200):
            big[i] = i                                     # a table resized, ints as keys
        e(big, {i: -i for i in range(7)})
        e("s" * 55, "t" * 56, "u" * 70, "é" * 20, 2 ** 600, -(2 ** 700), 2 ** 62)
        e(Many(), nn.Identity(), [x, [x, (x,)], {"x": x}])
        e(x, **{f"k{i}": (x, i) for i in range(12)})
        return e(x, mask=None, flag=True, scale=0.25)


def build():
    return Model()


def run(model):
    for _ in range(2):
        model(torch.ones(2, 3))
