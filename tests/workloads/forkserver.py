"""Fork server for the fault tests: imports torch and builds fault_model's model once,
then forks a fresh target per trial, so that a trial costs an attach, not a start.

stdin commands, one a line; answers on stdout:
    fork GO DONE N ROWS   fork a child that waits for the file GO, runs N forwards on
                          inputs of ROWS rows, writes "checksum X" to DONE and _exits(0)
                          -> "child PID"
    reap PID              -> "status S" (os.waitpid's status)
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import fault_model  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(0)
MODEL = fault_model.build()


def child(go, done, n, rows):
    while not os.path.exists(go):
        time.sleep(0.001)
    total = 0.0
    with torch.no_grad():
        for step in range(n):
            x = torch.full((rows, 4), float(step % 7) / 7.0)
            total += float(MODEL(x).sum())
    with open(done, "w") as handle:
        handle.write(f"checksum {total:.6f}\n")
    os._exit(0)


def main():
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "fork":
            go, done, n, rows = words[1], words[2], int(words[3]), int(words[4])
            pid = os.fork()
            if pid == 0:
                try:
                    child(go, done, n, rows)
                finally:
                    os._exit(70)
            print(f"child {pid}", flush=True)
        elif words[0] == "reap":
            _, status = os.waitpid(int(words[1]), 0)
            print(f"status {status}", flush=True)


main()
