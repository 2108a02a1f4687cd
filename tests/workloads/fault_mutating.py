"""Memory changing under the reader, for tests/test_faults_input.py.

A thread resizes a tensor between a 2-dim and a 7-dim shape without pause (resize_ runs
without the GIL, and 7 dims do not fit SizesAndStrides' inline storage, so its size
array is allocated and freed under the probe) while the main thread passes that tensor to
a module. Then a list whose item array points at unmapped memory is passed to another
module (its real pointer put back before Python looks at it again)."""
import ctypes
import os
import gc
import json
import sys
import threading

import torch
from torch import nn

SHAPES = [(2, 3), (1, 2, 1, 3, 1, 1, 1)]


class Probe(nn.Module):
    def forward(self, x):
        return None


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.probe = Probe()
        self.sink = Probe()

    def forward(self, x):
        return self.probe(x)


def build():
    return Model()


def run(model):
    x = torch.zeros(*SHAPES[0])
    stop = threading.Event()

    def resizer():
        while not stop.is_set():
            for shape in SHAPES:
                x.resize_(*shape)

    t = threading.Thread(target=resizer)
    t.start()
    for _ in range(int(os.environ.get('MUTATING_CALLS', '3000'))):
        model(x)
    stop.set()
    t.join()

    bad = [1.5, 2.5, 3.5]
    item_ptr = ctypes.c_void_p.from_address(id(bad) + 24)
    real = item_ptr.value
    gc.disable()
    calls = 0
    try:
        item_ptr.value = 0x10  # nothing is mapped there
        for _ in range(5):
            model.sink(bad)
            calls += 1
    finally:
        item_ptr.value = real
        gc.enable()
    print("mutating " + json.dumps({"shapes": SHAPES, "unreadable_calls": calls}),
          file=sys.stderr, flush=True)
