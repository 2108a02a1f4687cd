"""For tests/test_faults_processes.py: the traced parent runs 3 forwards and forks a child
that is not traced (no --follow). The child runs 5 forwards and calls a Python class
20,000 times, says so in FORK_DIR/child-PID, and waits there until FORK_DIR/done exists
(60 s at most), so that the test can read its code while it lives. The parent waits for
it, then runs 2 forwards more: 5 traced forwards in all."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fault_model  # noqa: E402


class Plain:
    def __call__(self):
        return 1


def build():
    return fault_model.build()


def run(model):
    folder = os.environ["FORK_DIR"]
    for step in range(3):
        model(fault_model.inputs(step))
    pid = os.fork()
    if pid == 0:
        for step in range(5):
            model(fault_model.inputs(step))
        plain = Plain()
        for _ in range(20000):
            plain()
        open(os.path.join(folder, f"child-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(folder, "done")) and time.monotonic() < deadline:
            time.sleep(0.02)
        os._exit(0)
    os.waitpid(pid, 0)
    for step in range(2):
        model(fault_model.inputs(step))
