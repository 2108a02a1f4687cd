"""A CPU job that loads the CUPTI agent as the CUDA driver would at cuInit (there is no
driver here): with EVMBPF_TEST_INJECT=1, dlopen CUDA_INJECTION64_PATH and call
InitializeInjection; then run a small model (without the variable: a job that never
initialises CUDA). The agent must give up with its reason and the job must run on unharmed."""
import ctypes
import os

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.ReLU()

    def forward(self, x):
        return self.b(self.a(x))


def build():
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if path and os.environ.get("EVMBPF_TEST_INJECT") == "1":
        print("InitializeInjection:", ctypes.CDLL(path).InitializeInjection(), flush=True)
    return Net()


def run(model):
    for _ in range(2):
        model(torch.ones(2, 4))
