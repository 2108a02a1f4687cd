"""A CUDA workload for scripts/gpu/cupti.sh's --numeric check (run_workload.py's
build/run form): module calls that pass and return CUDA tensors of every dtype the stats
take (float32, float16, bfloat16, float64, int64, int32, uint8, bool), non-contiguous
views (transposes, stepped slices, a storage offset), NaN and +/-Inf, empty tensors, and
tensors produced on a side stream; deterministic (cuDNN off), so that the reference's run
and evmbpf's see the same values. It prints its run() time and
torch.cuda.max_memory_allocated() at the end."""
import json
import time

import torch


class Mix(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x, mask):
        y = self.fc(x)
        y = y.masked_fill(mask, float("nan")) if mask.any() else y
        return y.t(), y[:, ::3], y.half(), y.to(torch.bfloat16)[1:], y.double().sum(0)


class Ints(torch.nn.Module):
    def forward(self, y):
        return y.argmax(-1), (y > 0), y.to(torch.int32)[::2], (y * 100).clamp(0, 255).to(torch.uint8)


class Inf(torch.nn.Module):
    def forward(self, y):
        z = y.clone()
        z[0, 0] = float("inf")
        z[-1, -1] = float("-inf")
        return z, z[:0]


class Side(torch.nn.Module):
    """work on a stream of its own: the tensor it returns was written there"""
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, y):
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            out = torch.nn.functional.gelu(y * 3 + 1)
        torch.cuda.current_stream().wait_stream(self.stream)
        return out


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = Mix(96)
        self.ints = Ints()
        self.inf = Inf()
        self.side = Side()
        self.big = torch.nn.Linear(96, 4096)

    def forward(self, x, mask):
        t, stepped, half, bf, total = self.mix(x, mask)
        self.ints(t)
        self.inf(stepped)
        s = self.side(half.float())
        return self.big(s)


def build():
    torch.backends.cudnn.enabled = False
    return Net().cuda()


def run(model):
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(64, 96, generator=g) * (1 + i) for i in range(6)]
    masks = [torch.zeros(64, 96, dtype=torch.bool) for _ in xs]
    masks[2][5, 7] = True                 # one forward with a NaN
    torch.cuda.synchronize()
    start = time.perf_counter()
    for x, m in zip(xs, masks):
        model(x.cuda(), m.cuda())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print("CUPTI_WORKLOAD " + json.dumps({
        "run_s": elapsed, "max_memory_allocated": torch.cuda.max_memory_allocated()}),
        flush=True)
