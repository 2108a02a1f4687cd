"""bound_calls.py's kwargs shape run twice. With BOUND_AFTER set, the first run is
followed by a line `first run done` on stdout and a wait until the file BOUND_AFTER names
exists: a test can make something happen between the two (another traced process leaving)
while this one's bound call site stays armed."""
import os
import sys
import time

SHAPE = "kwargs"
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bound_calls.py")).read())

_run_once = run


def run(model):
    _run_once(model)
    gate = os.environ.get("BOUND_AFTER")
    if gate:
        print("first run done", flush=True)
        deadline = time.monotonic() + 120
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                sys.exit(f"gave up waiting for {gate}")
            time.sleep(0.02)
    _run_once(model)
