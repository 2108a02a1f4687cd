"""Batches declared with note_samples in a long loop (SAMPLES_LOOP_S seconds, default
4): for stopping evmbpf while it watches note_samples."""
import os
import time

import torch
from torch import nn

from evalmetry.debug import note_samples


class Ctx:
    def __init__(self, doc_id, batch_row):
        self.task_name, self.doc_id, self.choice_idx, self.batch_row = "mmlu", doc_id, None, batch_row


def build():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU())


def run(model):
    x = torch.ones(2, 4)
    end = time.monotonic() + float(os.environ.get("SAMPLES_LOOP_S", "4"))
    doc = 0
    while time.monotonic() < end:
        note_samples([Ctx(doc, 0), Ctx(doc + 1, 1)])
        model(x)
        doc += 2
    print(f"done {doc}", flush=True)
