"""--cupti's GPU time without a GPU (scripts/gpu-check.sh --stand-in): with
EVMBPF_TEST_INJECT=1 the CUPTI agent is loaded as the driver would load it, and the
stand-in libcupti it opened (tests/cupti/fake_cuda.c, EVMBPF_CUPTI_LIB) is told, in each
leaf module's forward, to enter one kernel launch, a copy and a set through the agent's
callback, as a CUDA kernel launched there is seen by CUPTI. Prints CUPTI_WORKLOAD
{run_s, max_memory_allocated} as tests/gpu/cupti_workload.py does (no device: 0)."""
import ctypes
import json
import os
import time

import torch

LIB = None


def launch():
    if LIB is not None:
        LIB.fake_cupti_work(1)


class Leaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        launch()
        return self.lin(x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Leaf()
        self.b = Leaf()

    def forward(self, x):
        return self.b(self.a(x))


def build():
    global LIB
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if path and os.environ.get("EVMBPF_TEST_INJECT") == "1":
        print("InitializeInjection:", ctypes.CDLL(path).InitializeInjection(), flush=True)
        lib = os.environ.get("EVMBPF_CUPTI_LIB")
        if lib:
            LIB = ctypes.CDLL(lib)
    return Net()


def run(model):
    start = time.perf_counter()
    for _ in range(3):
        model(torch.ones(2, 4))
    print("CUPTI_WORKLOAD " + json.dumps({"run_s": time.perf_counter() - start,
                                         "max_memory_allocated": 0}), flush=True)
