"""Threads for tests/test_faults_threads.py: one model, four threads running forwards at once.
Thread 0 is started in build() (before evmbpf attaches with --wait-for), threads 1 and 2
in run() (after), and the main thread runs forwards too. A thread's inputs have as many
rows as its number + 1, so a trace can tell whose forward an event belongs to.
The thread with 2 rows raises in blocks.1.inner on its forwards 10 and 30, and catches
the exception outside the model: its frames are unwound on its own stack only. On
forwards 5, 20 and 40 every thread waits in blocks.1.inner until all four are there:
four forwards open at once, asked for (the scheduler's own switches vary with the
machine)."""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import fault_model  # noqa: E402

FORWARDS = int(os.environ.get("THREADS_FORWARDS", "60"))
START = threading.Event()
LOCAL = threading.local()
RAISES = (10, 30)
TOGETHER = tuple(s for s in (5, 20, 40) if s < FORWARDS)
MEET = threading.Barrier(4, timeout=120)
TIDS = {}
MODEL = None


def work(rows, wait):
    if wait:
        START.wait()
    TIDS[threading.get_native_id()] = rows
    with torch.no_grad():
        for step in range(FORWARDS):
            LOCAL.fail = rows == 2 and step in RAISES
            LOCAL.meet = step in TOGETHER
            try:
                MODEL(torch.full((rows, 4), float(step % 5)))
            except ValueError:
                pass


EARLY = []


def build():
    global MODEL
    MODEL = fault_model.build()
    inner = MODEL.blocks[1].inner
    plain = inner.forward

    def forward(x):
        if getattr(LOCAL, "fail", False):
            raise ValueError("this thread's forward fails")
        if getattr(LOCAL, "meet", False):
            MEET.wait()  # all four threads inside a forward at once
        return plain(x)

    inner.forward = forward
    EARLY.append(threading.Thread(target=work, args=(1, True)))
    EARLY[0].start()
    return MODEL


def run(model):
    sys.setswitchinterval(1e-5)
    late = [threading.Thread(target=work, args=(rows, False)) for rows in (2, 3)]
    START.set()
    for t in late:
        t.start()
    work(4, False)
    for t in EARLY + late:
        t.join()
    print("threads " + json.dumps({"tids": TIDS, "forwards": FORWARDS,
                                   "raises": len(RAISES), "together": len(TOGETHER)}),
          file=sys.stderr,
          flush=True)
