"""Run a workload as run_workload.py runs it untraced (seed 0, build(), eval(), run()
under no_grad()), without importing evalmetry: no note_samples() for evmbpf to watch, so
all 4 of x86's debug registers are free for bound call sites (docs/design.md).
Usage: run_plain.py WORKLOAD [--wait-for FILE]."""
import importlib.util
import os
import sys
import time

import torch


def main():
    path = sys.argv[1]
    torch.manual_seed(0)
    spec = importlib.util.spec_from_file_location("workload", path)
    workload = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workload)
    model = workload.build()
    model.eval()
    if len(sys.argv) > 3 and sys.argv[2] == "--wait-for":
        print(f"ready pid={os.getpid()}", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(sys.argv[3]):
            if time.monotonic() > deadline:
                sys.exit(f"gave up waiting for {sys.argv[3]}")
            time.sleep(0.01)
    with torch.no_grad():
        workload.run(model)


if __name__ == "__main__":
    main()
