"""A CUDA workload for scripts/gpu/cupti.sh (run_workload.py's build/run form): a small
conv net and an MLP on the GPU, several forwards, copies both ways, a memset, one
expandable-segment-sized allocation; at the end it prints what the check compares:
its run() time and torch.cuda.max_memory_allocated()."""
import json
import time

import torch


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.act = torch.nn.GELU()
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.act(self.fc(x)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(4)
        self.proj = torch.nn.Linear(128, 256)
        self.blocks = torch.nn.ModuleList(Block(256) for _ in range(4))
        self.head = torch.nn.Linear(256, 10)

    def forward(self, x):
        y = self.pool(self.conv(x)).flatten(1)
        y = self.proj(y)
        for block in self.blocks:
            y = block(y)
        return self.head(y)


def build():
    return Net().cuda()


def run(model):
    x = torch.randn(16, 3, 32, 32)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        out = model(x.cuda())
        out.zero_()                      # a memset
        out.cpu()                        # a copy back
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print("CUPTI_WORKLOAD " + json.dumps({
        "run_s": elapsed, "max_memory_allocated": torch.cuda.max_memory_allocated()}),
        flush=True)
