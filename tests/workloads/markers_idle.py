"""A host that imports evalmetry.debug first and marks no phase inside its forwards: its
module calls and isinstance() checks against torch.Tensor (a class with a metaclass: each
looks up __instancecheck__ through _PyObject_LookupSpecial on 3.11-3.13) must not run the
phase markers' program; a `with phase()` after them is followed.

    markers_idle.py REFERENCE_DIR STEP_DIR   (waits for STEP_DIR/go1, then STEP_DIR/go2)
"""
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
from evalmetry.debug import phase  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)


def main():
    steps = sys.argv[2]
    model, x = nn.Sequential(nn.Linear(2, 2), nn.ReLU()), torch.zeros(1, 2)
    torch.set_grad_enabled(False)  # no `with` in the counted window
    print("ready", flush=True)
    wait_for(os.path.join(steps, "go1"))
    for _ in range(200):
        isinstance(model, torch.Tensor)  # not its exact type: __instancecheck__ looked up
        model(x)
    open(os.path.join(steps, "done1"), "w").close()
    wait_for(os.path.join(steps, "go2"))
    with phase("marked"):
        model(x)
    open(os.path.join(steps, "done2"), "w").close()


if __name__ == "__main__":
    main()
