"""The same work with or without the host's markers: with PHASES_BY_MARKERS=1 it marks
its phases with phase(); without, a tracer must name them by rules on the functions
score() and generate_step() (evmbpf --phase)."""
import contextlib
import os

import torch
from torch import nn

from evalmetry.debug import phase as _phase

MARKED = os.environ.get("PHASES_BY_MARKERS") == "1"


def phase(name):
    return _phase(name) if MARKED else contextlib.nullcontext()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, ids):
        return self.head(self.embed(ids))


def build():
    return Model()


def score(model, ids):
    with phase("model_forward"):
        return model(ids)


def generate_step(model, ids):
    with phase("generate"):
        return model(ids)


def run(model):
    ids = torch.zeros(1, 3, dtype=torch.long)
    model(ids)
    for _ in range(2):
        score(model, ids)
    generate_step(model, ids)
