"""A multi-process evaluation job on CPU: WORLD ranks joined by gloo, each running the same
small model's forwards with an all_reduce after each, as data-parallel evaluation does.

    ranks_job.py DIR [--world N] [--forwards K] [--reference] [--kill-rank R]
                 [--torchrun] [--wait-for FILE] [--fork-worker] [--time]

Each rank writes DIR/rank{R}.pid (its pid) when it starts, and with --reference traces
itself with the reference tracer into DIR/ref-rank{R}.jsonl (the reference is per
process). --kill-rank R: rank R SIGKILLs itself in the middle of its second forward
(DIR/killed is written first), while the others wait for it in all_reduce.
--torchrun: this script was started by torchrun (RANK, WORLD_SIZE, MASTER_* set), else
it starts its ranks with torch.multiprocessing.spawn. --wait-for FILE: the launcher
waits for FILE before it starts the ranks (for attaching to it first).
--fork-worker: each rank forks a worker (fork without exec, as a DataLoader worker is)
that runs one forward of its own model before the rank's forwards.
"""
import argparse
import datetime
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "..", "shared", "reference")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402


class Killer(nn.Module):
    """Identity, except on the chosen rank's chosen forward: SIGKILL, mid-forward."""

    def __init__(self, kill):
        super().__init__()
        self.kill = kill
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.kill and self.calls == 2:
            with open(self.kill, "w") as handle:
                handle.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return x


class Model(nn.Module):
    def __init__(self, kill=None):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.GELU())
                                     for _ in range(2)])
        self.killer = Killer(kill)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        x = self.killer(x)
        return self.head(x)


def worker_child(args):
    """The forked worker: a forward of a model of its own, then _exit."""
    with torch.no_grad():
        nn.Sequential(nn.Linear(8, 8), nn.ReLU())(torch.ones(2, 8))
    os._exit(0)


def rank_main(rank, world, args):
    torch.set_num_threads(1)
    with open(os.path.join(args.dir, f"rank{rank}.pid"), "w") as handle:
        handle.write(str(os.getpid()))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    if args.fork_worker:
        pid = os.fork()
        if pid == 0:
            worker_child(args)
        os.waitpid(pid, 0)
    torch.manual_seed(0)
    kill = os.path.join(args.dir, "killed") if rank == args.kill_rank else None
    model = Model(kill).eval()
    inputs = [torch.randn(2 + rank, 8) for _ in range(args.forwards)]

    def work():
        spent = 0.0
        for x in inputs:
            start = time.perf_counter()
            out = model(x)
            spent += time.perf_counter() - start
            total = out.sum().reshape(1)
            dist.all_reduce(total)
        if args.time:  # the forwards alone, 10 module calls each
            with open(os.path.join(args.dir, f"time-rank{rank}.txt"), "w") as handle:
                handle.write(f"{spent / (10 * len(inputs)) * 1e6:.3f}\n")

    with torch.no_grad():
        if args.reference:
            sys.path.insert(0, REFERENCE)
            from evalmetry.debug import DebugConfig, ModuleTracer
            from run_workload import _shim_old_torch  # torch < 2.0: no with_kwargs
            _shim_old_torch(torch)
            tracer = ModuleTracer(model, DebugConfig(enabled=True),
                                  os.path.join(args.dir, f"ref-rank{rank}.jsonl"))
            with tracer.session():
                work()
        else:
            work()
    dist.barrier()
    dist.destroy_process_group()
    # rank 0 hosts the env:// store and leaves last: a slower rank (traced, on a loaded
    # machine) can still be in destroy_process_group, waiting on the store, when a fast
    # rank 0 has exited (torchrun, 4 ranks: it waited until the store's timeout)
    open(os.path.join(args.dir, f"done-rank{rank}"), "w").close()
    if rank == 0:
        deadline = time.monotonic() + args.timeout
        others = [os.path.join(args.dir, f"done-rank{r}") for r in range(1, world)
                  if r != args.kill_rank]
        while time.monotonic() < deadline and not all(map(os.path.exists, others)):
            time.sleep(0.01)


def spawned(index, world, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    rank_main(index, world, args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--forwards", type=int, default=3)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--torchrun", action="store_true")
    parser.add_argument("--fork-worker", action="store_true")
    parser.add_argument("--wait-for")
    parser.add_argument("--time", action="store_true",
                        help="write DIR/time-rank{R}.txt: microseconds a module call")
    parser.add_argument("--port", type=int, default=29500)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    if args.torchrun:
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    if args.wait_for:
        print(f"ready pid={os.getpid()}", flush=True)
        while not os.path.exists(args.wait_for):
            time.sleep(0.01)
    import torch.multiprocessing as mp
    mp.spawn(spawned, args=(args.world, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
