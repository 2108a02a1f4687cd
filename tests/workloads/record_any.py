"""A small model's forwards for the flight recorder's tests (tests/test_record.py): how the
process ends is chosen by the environment, so one workload gives the recorder's cases.

    RECORD_FORWARDS=N     forwards to run (default 8), 11 events each
    RECORD_HANG_AT=K      in forward K (0-based) the `layers.1` module (Wait) hangs: it
                          creates RECORD_FLAG (when set), then waits until RECORD_RESUME
                          exists (RECORD_PAUSE seconds at most, default 300; without
                          RECORD_RESUME it waits those seconds), then goes on
    RECORD_END=ok|sysexit after the forwards: return (exit 0), or sys.exit(3)

With RECORD_HANG_AT unset the module calls are the same, so the reference's trace of a
run that does not hang is the oracle for the events before the hang.
"""
import os
import sys
import time

import torch
from torch import nn


class Wait(nn.Module):
    """Identity, except in forward RECORD_HANG_AT: there it hangs, inside the forward."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        hang_at = os.environ.get("RECORD_HANG_AT")
        if hang_at is not None and self.calls == int(hang_at):
            flag = os.environ.get("RECORD_FLAG")
            if flag:
                with open(flag, "w") as handle:
                    handle.write(str(os.getpid()))
            resume = os.environ.get("RECORD_RESUME")
            deadline = time.monotonic() + float(os.environ.get("RECORD_PAUSE", "300"))
            while time.monotonic() < deadline and not (resume and os.path.exists(resume)):
                time.sleep(0.01)
        self.calls += 1
        return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), Wait(), nn.ReLU()])
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build():
    return Model()


def run(model):
    for step in range(int(os.environ.get("RECORD_FORWARDS", "8"))):
        model(torch.full((1, 4), float(step)))
    if os.environ.get("RECORD_END", "ok") == "sysexit":
        sys.exit(3)
