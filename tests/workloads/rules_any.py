"""The same work marked by the host's phase() (PHASES_BY_MARKERS=1), or left for
`evmbpf --phase` rules to name: a method of a base class called through a subclass
(`Harness.score`; 3.9/3.10 code objects carry no qualified name, so evmbpf rebuilds it
from the class) and a module-level function (`generate_step`).

Runs on real torch and on the stand-in (tests/standin): nn.Module, nn.Sequential and
nn.Identity only, called with ints."""
import contextlib
import os

from torch import nn

from evalmetry.debug import phase as _phase

MARKED = os.environ.get("PHASES_BY_MARKERS") == "1"


def phase(name):
    return _phase(name) if MARKED else contextlib.nullcontext()


class Harness:
    def score(self, model, x):
        with phase("model_forward"):
            return model(x)


class TaskHarness(Harness):
    pass


def generate_step(model, x):
    with phase("generate"):
        return model(x)


def build():
    return nn.Sequential(nn.Identity(), nn.Sequential(nn.Identity(), nn.Identity()))


def run(model):
    harness = TaskHarness()
    model(0)
    for i in range(2):
        harness.score(model, i + 1)
    generate_step(model, 3)
