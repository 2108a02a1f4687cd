"""CUDA workload for scripts/gpu/mem.sh (run by the reference's run_workload.py): the
allocator's counters change between module calls. MEM_SCENARIO:
  all       allocations and frees inside and between calls, a peak reset, empty_cache,
            an OOM caught and retried at half the size until it fits (the batch-size
            probe), and, with two devices, a model on cuda:1 called under
            torch.cuda.device(1) and after torch.cuda.set_device(1)
  basic     a few forwards
  uncaught  an OOM that escapes run(): the error event's mem
  lazy      CUDA untouched until run(): a forward on the CPU, then CUDA's lazy init and
            at once a forward on the GPU (the first enter after the init has counters)
MEM_DEVICE=N: build() calls torch.cuda.set_device(N) first (by --pid: a thread that set
its device before the attach), and the model lives there."""
import os

import torch
from torch import nn

SCENARIO = os.environ.get("MEM_SCENARIO", "all")


class Grow(nn.Module):
    """Allocates a scratch tensor of `rows` rows, keeps some of it, frees the rest."""

    def __init__(self, width=1024):
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.keep = []

    def forward(self, x, rows=256):
        scratch = torch.empty(rows, x.shape[1], device=x.device)
        self.keep.append(scratch[:1].clone())
        return self.lin(x) + scratch[: x.shape[0]].sum()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Grow()
        self.b = Grow()
        self.act = nn.GELU()

    def forward(self, x, rows=256):
        return self.act(self.b(self.a(x, rows=rows), rows=rows * 2))


class Huge(nn.Module):
    def forward(self, x, rows):
        return torch.empty(rows, 1 << 20, device=x.device)  # rows MiB * 4


DEVICE = os.environ.get("MEM_DEVICE")


def build():
    torch.manual_seed(0)
    if SCENARIO == "lazy":
        return Model()  # on the CPU: CUDA not initialised
    if DEVICE is not None:
        torch.cuda.set_device(int(DEVICE))
    model = Model().cuda()
    model.huge = Huge()
    if torch.cuda.device_count() >= 2 and SCENARIO == "all":
        model.other = Model().to("cuda:1")
    return model


def run(model):
    if SCENARIO == "lazy":
        model(torch.ones(8, 1024))
        model = model.cuda()  # CUDA's lazy init here
        x = torch.ones(8, 1024, device="cuda")
        for k in range(3):
            model(x, rows=256 * (k + 1))
        return
    x = torch.ones(8, 1024, device="cuda")
    if SCENARIO == "uncaught":
        model(x)
        free, total = torch.cuda.mem_get_info()
        model.huge(x, rows=2 * total // (4 << 20))
        return
    for k in range(3):
        model(x, rows=256 * (k + 1))
    if SCENARIO == "basic":
        return
    del model.a.keep[:]
    model(x)
    torch.cuda.reset_peak_memory_stats()
    model(x, rows=64)
    torch.cuda.empty_cache()
    model(x, rows=64)
    free, total = torch.cuda.mem_get_info()
    rows = 2 * total // (4 << 20)  # twice the card
    out = None
    while rows:
        try:
            out = model.huge(x, rows=rows)
            break
        except torch.cuda.OutOfMemoryError:
            rows //= 2
    del out
    model(x)
    if hasattr(model, "other"):
        y = x.to("cuda:1")
        with torch.cuda.device(1):
            model.other(y)
        model(x)  # back on device 0
        torch.cuda.set_device(1)
        model.other(y, rows=512)
        torch.cuda.set_device(0)
        model(x)
