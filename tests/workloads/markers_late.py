"""A host that imports evalmetry.debug only after evmbpf has attached: before that, its
isinstance() checks against torch.Tensor (a class with a metaclass: each looks up
__instancecheck__ through _PyObject_LookupSpecial on 3.11-3.13) and a `with` must cost no
trap of the phase markers' probe; after it, `with phase()` is followed.

    markers_late.py REFERENCE_DIR STEP_DIR   (waits for STEP_DIR/go1, then STEP_DIR/go2)
"""
import os
import sys
import time

import torch
from torch import nn


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)


def main():
    reference, steps = sys.argv[1], sys.argv[2]
    model, x = nn.Linear(2, 2), torch.zeros(1, 2)
    print("ready", flush=True)
    wait_for(os.path.join(steps, "go1"))
    with torch.no_grad():
        for _ in range(200):
            isinstance(model, torch.Tensor)
            model(x)
    open(os.path.join(steps, "done1"), "w").close()
    wait_for(os.path.join(steps, "go2"))
    sys.path.insert(0, reference)
    from evalmetry.debug import phase
    with phase("late"):
        model(x)
    open(os.path.join(steps, "done2"), "w").close()


if __name__ == "__main__":
    main()
