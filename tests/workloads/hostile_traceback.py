"""A process that names a file of its choice in its own traceback, as any user can:
`compile(src, PATH, "exec")`, then a module call that raises from that code. PATH is
argv[1]; it waits for a go file (argv[2]) before the module call, so that a tracer can
attach first. With argv[3], once its own traceback is printed (PATH a regular file then),
it moves argv[3] (a FIFO, a link to /dev/zero) over PATH before it exits: what a tracer
reading the file later finds there."""
import os
import sys
import time

import torch

path, go = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    def swap(*exc):
        sys.__excepthook__(*exc)
        os.replace(sys.argv[3], path)
    sys.excepthook = swap
print(f"ready pid={os.getpid()}", flush=True)
ns = {}
exec(compile("def f(x):\n    raise RuntimeError('from a file of my choosing')\n", path, "exec"), ns)


class M(torch.nn.Module):
    def forward(self, x):
        return ns["f"](x)


while not os.path.exists(go):
    time.sleep(0.01)
M()(torch.zeros(1))
