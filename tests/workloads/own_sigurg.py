"""A process that handles SIGURG, installed after a tracer attached, and sends itself one
between two module calls: exits 0 when its handler ran (9 when the signal was lost).
Waits for a go file (argv[1]) first."""
import os
import signal
import sys
import time

import torch

go = sys.argv[1]
print(f"ready pid={os.getpid()}", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
got = []
signal.signal(signal.SIGURG, lambda *a: got.append(1))
model = torch.nn.Linear(2, 2)
model(torch.zeros(1, 2))
os.kill(os.getpid(), signal.SIGURG)
time.sleep(0.2)
model(torch.zeros(1, 2))
sys.exit(0 if got else 9)
