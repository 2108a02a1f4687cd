"""Threads: each has its own stack in the trace, and a SIGKILL ends each one's frames. Figures are printed
(`pytest -s`). Shared helpers: faults_lib.py; the fork server and the full trace the
killed ones are compared with: conftest.py."""
import json
import os
import re
import signal
import time

import pytest

from evmbpf_testlib import (OWN_WORKLOADS, Attached)
from faults_lib import (open_stack, read_jsonl)

pytestmark = pytest.mark.root


# ---------------------------------------------------------------- threads

THREADS_WORKLOAD = os.path.join(OWN_WORKLOADS, "fault_threads.py")


def test_threads_each_have_their_own_stack(evmbpf, tmp_path):
    """Four threads (one started before evmbpf attaches, two after, and the main thread)
    run forwards of one model at once; three times they wait for each other inside a
    forward, so that the trace has four forwards open at once at least that often (what
    the workload asked for, whatever the scheduler did besides)."""
    out = str(tmp_path / "t.jsonl")
    run = Attached(THREADS_WORKLOAD, out)
    run.release()
    run.finish()
    assert run.target_rc == 0, run.target_err
    assert run.tracer_rc == 0, run.tracer_err
    events, _ = read_jsonl(out)
    plan = json.loads(re.search(r"threads (\{.*\})", run.target_err).group(1))
    modules = [e for e in events if e["event"] in ("enter", "exit", "forward", "unwound")]
    tids = {e["tid"] for e in modules}
    assert tids == {int(t) for t in plan["tids"]}, (tids, plan)
    stacks = open_stack(modules)
    assert all(not s for s in stacks.values()), stacks
    assert not [e for e in events if e["event"] == "dropped"]
    # the failing thread's frames are unwound on its own stack, when its next forward begins
    failing = next(int(t) for t, rows in plan["tids"].items() if rows == 2)
    unwound = [e for e in events if e["event"] == "unwound"]
    assert {e["tid"] for e in unwound} == {failing}
    assert [e["module"] for e in unwound] == ["<root>", "blocks.1", "blocks.1.inner"] * \
        plan["raises"]
    assert {e["reason"] for e in unwound} == {"a new forward began"}
    # forwards: each thread's events carry the forward that thread began, and its inputs
    current, per_thread, switches, last_tid = {}, {}, 0, None
    depth, all_open, together = {}, False, 0
    for e in modules:
        tid = e["tid"]
        if e["event"] == "enter":
            depth[tid] = depth.get(tid, 0) + 1
        elif e["event"] in ("exit", "unwound"):
            depth[tid] = depth.get(tid, 0) - 1
        now_open = sum(1 for d in depth.values() if d > 0) == len(plan["tids"])
        together += now_open and not all_open
        all_open = now_open
        if e["event"] == "forward":
            current[tid] = e["forward"]
            per_thread[tid] = per_thread.get(tid, 0) + 1
            continue
        assert e["forward"] == current[tid], f"tid {tid} in forward {current[tid]}: {e}"
        if e["event"] == "enter" and e["module"] == "<root>":
            rows = e["args"][0]["shape"][0]
            assert rows == plan["tids"][str(tid)], (tid, rows)
        if last_tid is not None and tid != last_tid:
            switches += 1
        last_tid = tid
    assert sorted(per_thread.values()) == [plan["forwards"]] * len(tids)
    assert len(set(current.values())) == len(tids)
    print(f"\nthreads: {len(tids)} threads, {sum(per_thread.values())} forwards, "
          f"{len(modules)} events, {switches} switches between threads mid-stream")
    assert together >= plan["together"], (
        f"four forwards open at once {together} times; the workload met {plan['together']}")


def test_sigkill_with_threads(evmbpf, tmp_path):
    """SIGKILL while four threads are inside forwards: one `error`, then each thread's
    own open stack unwound, outermost first, its deepest frame marked."""
    out = str(tmp_path / "t.jsonl")
    run = Attached(THREADS_WORKLOAD, out, env=dict(os.environ, THREADS_FORWARDS="100000"))
    run.release()
    time.sleep(0.5)
    run.target.kill()
    run.finish()
    assert run.target_rc == -signal.SIGKILL
    assert run.tracer_rc == 0, run.tracer_err
    events, _ = read_jsonl(out)
    cut = next(i for i, e in enumerate(events) if e["event"] == "error")
    assert events[cut]["exc_type"] == "SIGKILL"
    stacks = open_stack(events[1:cut])
    unwound = events[cut + 1:]
    assert all(e["event"] == "unwound" and e["reason"] == "process exited" for e in unwound)
    by_tid = {}
    for e in unwound:
        by_tid.setdefault(e["tid"], []).append(e)
    assert {t: [(e["module"], e["call"]) for e in es] for t, es in by_tid.items()} == \
        {t: s for t, s in stacks.items() if s}
    for es in by_tid.values():
        assert [e["deepest"] for e in es] == [False] * (len(es) - 1) + [True]
        assert len({e["forward"] for e in es}) == 1
    print(f"\nSIGKILL with threads: {len(by_tid)} threads died inside forwards, "
          f"{len(unwound)} frames unwound on their own stacks")
