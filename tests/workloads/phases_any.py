"""Phase markers in the harder cases: nested, left by an exception that a module raised,
left by an exception raised in the marker's own block, and re-entered in a hook.

Runs on any torch, the stand-in too (nn.Module and nn.Identity, called with ints);
phases_more.py runs the same work on real layers and tensors."""
from torch import nn

from evalmetry.debug import phase


class Fragile(nn.Module):
    def forward(self, x, fail=False):
        if fail:
            raise RuntimeError("inner failure")
        return x + 1


class Model(nn.Module):
    def __init__(self, lin=None, norm=None):
        super().__init__()
        self.lin = nn.Identity() if lin is None else lin
        self.fragile = Fragile()
        self.norm = nn.Identity() if norm is None else norm

    def forward(self, x, fail=False):
        return self.norm(self.fragile(self.lin(x), fail=fail))


def build(model=None):
    model = Model() if model is None else model

    def lens(module, args, output):
        with phase("signal_collection"):
            model.norm(output)

    model.lin.register_forward_hook(lens)
    return model


def run(model, x=1):
    model(x)                                   # other
    with phase("generate"):
        with phase("model_forward"):
            model(x)                           # model_forward, lens in signal_collection
        model(x)                               # generate
        try:
            with phase("model_forward"):
                model(x, fail=True)            # left by the module's exception
        except RuntimeError:
            pass
        model(x)                               # generate again
    try:
        with phase("scoring"):
            model(x)
            raise ValueError("left by the block itself")
    except ValueError:
        pass
    model(x)                                   # other
