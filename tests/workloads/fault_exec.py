"""exec for tests/test_faults_processes.py: three forwards, then os.execv into another Python that
runs five forwards of its own model; the trace ends at the exec."""
import os
import sys

import torch
from torch import nn

AFTER = ("import sys, torch\n"
         "m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())\n"
         "with torch.no_grad():\n"
         "    [m(torch.ones(1, 2)) for _ in range(5)]\n"
         "print('after exec: 5 forwards', file=sys.stderr, flush=True)\n")


def build():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU())


def run(model):
    for _ in range(3):
        model(torch.ones(2, 4))
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-c", AFTER])
