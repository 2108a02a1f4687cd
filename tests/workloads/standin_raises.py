"""An exception nothing catches, on real torch or the stand-in (tests/standin).

Forward 1 runs through; in forward 2 the innermost module raises a ValueError whose
message has quotes and non-ASCII text, its parent catches and re-raises nothing, and
the process exits with it: the tracer's `error` event (type, message, traceback) is
what PyErr_Display saw."""
from torch import nn


class Leaf(nn.Module):
    def forward(self, x, fail=False):
        if fail:
            raise ValueError("bad value 'x' for caf\u00e9 at step %d" % x)
        return x + 1


class Middle(nn.Module):
    def __init__(self):
        super().__init__()
        self.leaf = Leaf()

    def forward(self, x, fail=False):
        return self.leaf(x, fail=fail) * 2


class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.middle = Middle()
        self.tail = nn.Identity()

    def forward(self, x, step=0):
        return self.tail(self.middle(x, fail=step == 1))


def build():
    return Top()


def run(model):
    for step in range(2):
        model(step, step=step)
