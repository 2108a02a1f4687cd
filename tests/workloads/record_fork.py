"""A fork without exec for the flight recorder's tests (tests/test_record.py), as a
run_workload.py workload: the parent calls a module of its own, then os.fork()s; the
child runs the work of another workload (RECORD_FORK_OF, a path: its build() is this
one's, its environment knobs decide how the child ends, as they would end a process of
its own). The parent waits for the child, prints `child PID STATUS` on stdout, calls its
module again and returns (exit 0).

The child starts from the fork with no module call open, so its trace is the trace of
a process that ran RECORD_FORK_OF alone: the reference's trace of that workload is the
oracle.
"""
import importlib.util
import os
import sys

import torch
from torch import nn


def _load(path):
    spec = importlib.util.spec_from_file_location("record_fork_inner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_inner = _load(os.environ["RECORD_FORK_OF"])


def build():
    return _inner.build()


def run(model):
    own = nn.Linear(2, 2)
    own(torch.ones(1, 2))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _inner.run(model)  # an exception or sys.exit() ends the child here
        sys.stdout.flush()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(f"child {pid} {os.waitstatus_to_exitcode(status)}", flush=True)
    own(torch.ones(1, 2))
