"""An evaluation loop that says which documents each batch is for: evalmetry's
note_samples(contexts) before each batch (dataclasses, a duck-typed object with only
some of the attributes, a __slots__ class, a tuple of contexts, an empty batch), a
batch-size probe under without_samples() that raises inside a forward and is caught,
and a document whose forward raises and is caught (the next batch reconciles it).

SAMPLES_CRASH=1: the target is killed (SIGKILL) inside a forward of the last batch;
SAMPLES_RAISE=1: that forward raises, uncaught."""
import dataclasses
import os
import signal
from typing import Optional

import torch
from torch import nn

from evalmetry.debug import note_samples, phase, without_samples

# tests/standin's torch (pyenv Pythons) has no layers or tensors: Identity on ints there
REAL = hasattr(torch, "ones") and hasattr(nn, "Linear")


def data(rows):
    return torch.ones(rows, 4) if REAL else rows


@dataclasses.dataclass
class ForwardContext:
    task_name: str
    doc_id: int
    choice_idx: Optional[int]
    batch_row: int


class Loose:
    """Duck-typed: only doc_id (the others are getattr's defaults)."""

    def __init__(self, doc_id):
        self.doc_id = doc_id


class Slotted:
    __slots__ = ("task_name", "doc_id", "choice_idx", "batch_row")

    def __init__(self, task_name, doc_id, choice_idx, batch_row):
        self.task_name, self.doc_id = task_name, doc_id
        self.choice_idx, self.batch_row = choice_idx, batch_row


class Defaulted:
    """Attributes from the class: a class-level default."""
    task_name = "piqa"
    choice_idx = None

    def __init__(self, doc_id, batch_row):
        self.doc_id, self.batch_row = doc_id, batch_row


class Fragile(nn.Module):
    def forward(self, x, fail=False):
        if fail:
            raise RuntimeError("out of memory (simulated)")
        rows = x.shape[0] if REAL else x
        if os.environ.get("SAMPLES_CRASH") == "1" and rows == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("SAMPLES_RAISE") == "1" and rows == 3:
            raise RuntimeError("CUDA out of memory (simulated)")
        return x + 1


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4) if REAL else nn.Identity()
        self.fragile = Fragile()
        self.norm = nn.LayerNorm(4) if REAL else nn.Identity()

    def forward(self, x, fail=False):
        return self.norm(self.fragile(self.lin(x), fail=fail))


def build():
    return Model()


def run(model):
    x = data(2)
    note_samples([ForwardContext("arc_easy", 0, 0, 0), ForwardContext("arc_easy", 0, 1, 1)])
    with phase("model_forward"):
        model(x)
    model(x)                                   # sticky: the same documents
    with without_samples():                    # a batch-size probe, caught
        try:
            with phase("model_forward"):
                model(data(16), fail=True)
        except RuntimeError:
            pass
    model(x)                                   # the batch's documents again
    note_samples([ForwardContext("hellaswag", 7, None, 0), Loose(8),
                  Slotted("hellaswag", 9, 2, 3)])
    try:
        model(x, fail=True)                    # a document's forward raises, caught
    except RuntimeError:
        pass
    note_samples((Defaulted(12, 0), Defaulted(13, 1)))  # reconciles the frames left
    with phase("generate"):
        model(x)
        model(x)
    note_samples([])                           # no documents
    model(x)
    note_samples([ForwardContext("t\u00e2che \u2603", 2 ** 40, -3, 2)])
    model(data(3))                    # SAMPLES_CRASH=1: killed here
    model(x)
