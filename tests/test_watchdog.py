"""evmbpf killed while it holds the target: the target still runs on. A hold is a ptrace
stop (state "t", never a group-stop "T"): when evmbpf dies the kernel detaches, and the
SIGURG that held the thread is ignored."""
import os
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import EVMBPF, HOST_PYTHON, REF_WORKLOADS, RUN_WORKLOAD, Attached, proc_state

pytestmark = pytest.mark.root


@pytest.mark.parametrize("mode", ["launch", "pid"])
def test_sigkill_during_the_hold_leaves_the_target_running(evmbpf, tmp_path, mode):
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    env = dict(os.environ, EVMBPF_TEST_HOLD_DELAY_MS="4000")
    out = str(tmp_path / "t.jsonl")
    if mode == "launch":
        tracer = subprocess.Popen([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                                   workload], env=env, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        assert "attached to" in tracer.stderr.readline()
        target_pid = int(open(f"/proc/{tracer.pid}/task/{tracer.pid}/children").read().split()[0])
    else:
        run = Attached(workload, out)
        tracer = run.tracer
        target_pid = run.pid
        # restart the tracer with the delay: the first one is not holding anything yet
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
        os.unlink(out)
        tracer = subprocess.Popen([EVMBPF, "--pid", str(target_pid), "--out", out], env=env,
                                  stderr=subprocess.PIPE, text=True)
        assert "attached to" in tracer.stderr.readline()
        run.release()
    deadline = time.monotonic() + 20
    while proc_state(target_pid) != "t":
        assert proc_state(target_pid) != "T", "held by a group-stop, which a parent sees"
        assert time.monotonic() < deadline, "the target was never held"
        time.sleep(0.02)
    tracer.kill()
    tracer.wait()
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{target_pid}") and proc_state(target_pid) in "tT":
        assert time.monotonic() < deadline, "the target stayed stopped after evmbpf died"
        time.sleep(0.05)
    if mode == "pid":
        assert run.target.wait(timeout=120) == 0
