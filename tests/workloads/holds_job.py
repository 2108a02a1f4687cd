"""A job as another user runs it: waits for a go file (argv[1], or "-" to start at
once), makes three Linear calls, and exits with status argv[2]. Its command line holds
evmbpf-wanted only where the caller puts it there (evmbpf record --match)."""
import os
import sys
import time

import torch

go, status = sys.argv[1], int(sys.argv[2])
print(f"ready pid={os.getpid()}", flush=True)
while go != "-" and not os.path.exists(go):
    time.sleep(0.01)
model = torch.nn.Linear(4, 4)
x = torch.zeros(1, 4)
for _ in range(3):
    model(x)
sys.exit(status)
