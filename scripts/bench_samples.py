#!/usr/bin/env python3
"""The cost of a note_samples(contexts) call seen by evmbpf: run this under evmbpf and
plainly, and compare. Each iteration declares a batch of 8 documents and runs one
forward of a 4-module model; it prints the median and fastest µs per iteration.

    python3 scripts/bench_samples.py                    # untraced
    sudo build/evmbpf --out /tmp/t.jsonl -- python3 scripts/bench_samples.py
"""
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "shared", "reference"))
import torch  # noqa: E402
from torch import nn  # noqa: E402

from evalmetry.debug import note_samples  # noqa: E402


@dataclasses.dataclass
class Ctx:
    task_name: str
    doc_id: int
    choice_idx: int
    batch_row: int


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).eval()
    x = torch.ones(8, 4)
    batches = [[Ctx("arc", b * 8 + i, 0, i) for i in range(8)] for b in range(iters)]
    with_samples, without = [], []
    with torch.no_grad():
        for batch in batches:
            t0 = time.perf_counter_ns()
            note_samples(batch)
            model(x)
            t1 = time.perf_counter_ns()
            model(x)
            t2 = time.perf_counter_ns()
            with_samples.append((t1 - t0) / 1000)
            without.append((t2 - t1) / 1000)
    for name, xs in (("note_samples + forward", with_samples), ("forward", without)):
        print(f"{name:24s} median {statistics.median(xs):8.1f} us  fastest {min(xs):8.1f} us")


if __name__ == "__main__":
    main()
