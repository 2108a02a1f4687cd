"""One record a leaf call (docs/design.md, "One record a leaf call"; EVMBPF_LEAF_PAIRS=1,
off by default): the probes keep a plain enter back and send it with its exit as one
record. The trace must be the one two records a call give (the default), and an enter kept back must reach the trace
while its call runs on (a thread inside a long leaf: a hang) and when evmbpf stops
inside it. A thread that dies inside a leaf: test_faults_target.py (blocks.1.inner dies
before its first child) and its SIGKILLs at random points."""
import json
import os
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, RUN_WORKLOAD, load

pytestmark = pytest.mark.root

SLOW = os.path.join(OWN_WORKLOADS, "slow_leaf.py")


def comparable(events):
    """The events without what differs from run to run (thread ids, clocks, pids)."""
    out = []
    for e in events:
        e = {k: v for k, v in e.items() if k not in ("tid", "ts_ns", "created")}
        if e["event"] == "header":
            e.pop("tracer", None)
        out.append(e)
    return out


def launched(workload, out, defer, env=None, stats=None):
    env = dict(env or os.environ)
    env.pop("EVMBPF_LEAF_PAIRS", None)
    if defer:
        env["EVMBPF_LEAF_PAIRS"] = "1"
    args = [EVMBPF, "--out", out] + (["--stats", stats] if stats else [])
    return subprocess.Popen(args + ["--", HOST_PYTHON, RUN_WORKLOAD, workload], env=env,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("workload", ["tiny_transformer", "raises"])
def test_one_record_a_leaf_call_writes_the_same_trace(evmbpf, workload, tmp_path):
    """Launched with and without: the same events, key for key; --stats counts the leaf
    calls sent as one record with it and none without."""
    path = os.path.join(REF_WORKLOADS, workload + ".py")
    traces, pairs = {}, {}
    for defer in (True, False):
        out, stats = str(tmp_path / f"{defer}.jsonl"), str(tmp_path / f"{defer}.stats")
        tracer = launched(path, out, defer, stats=stats)
        _, err = tracer.communicate(timeout=300)
        assert "attached to" in err, err
        traces[defer] = comparable(load(out))
        with open(stats) as handle:
            pairs[defer] = json.load(handle)["leaf_pairs"]
    assert traces[True] == traces[False]
    calls = sum(e["event"] == "enter" for e in traces[True])
    assert 0 < pairs[True] < calls and pairs[False] == 0, (pairs, calls)


def wait_for(path, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.01)


def test_a_leaf_that_lasts_is_in_the_trace_while_it_runs(evmbpf, tmp_path):
    """`slow` waits inside its second call: its enter, kept back by the probes, is in the
    streamed trace a second later (the collector takes what is kept over 20 ms); resumed,
    the trace is the one two records a call write."""
    traces = {}
    for defer in (True, False):
        flag, resume = str(tmp_path / f"flag{defer}"), str(tmp_path / f"resume{defer}")
        env = dict(os.environ, SLOW_FLAG=flag, SLOW_RESUME=resume)
        out = str(tmp_path / f"{defer}.jsonl")
        tracer = launched(SLOW, out, defer, env=env)
        try:
            wait_for(flag, tracer)
            time.sleep(1)
            last = load(out)[-1]
            assert (last["event"], last["module"], last["forward"]) == ("enter", "2", 2), last
        finally:
            open(resume, "w").close()
        _, err = tracer.communicate(timeout=120)
        assert tracer.returncode == 0, err
        traces[defer] = comparable(load(out))
    assert traces[True] == traces[False]


@pytest.mark.parametrize("pairs", [True, False], ids=["leaf-pairs", "two-records"])
def test_stopped_inside_a_leaf(evmbpf, pairs, tmp_path):
    """evmbpf stopped (SIGINT) at once while `slow` waits, attached by --pid: the trace
    ends with `slow`'s enter written (with leaf pairs, taken once the probes are gone)
    and the frames left open unwound; the target runs on and ends well."""
    flag, resume, go = (str(tmp_path / n) for n in ("flag", "resume", "go"))
    env = dict(os.environ, SLOW_FLAG=flag, SLOW_RESUME=resume)
    env.pop("EVMBPF_LEAF_PAIRS", None)
    target = subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, SLOW, "--wait-for", go], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out = str(tmp_path / "t.jsonl")
    tracer = subprocess.Popen([EVMBPF, "--pid", str(target.pid), "--out", out],
                              stderr=subprocess.PIPE, text=True,
                              env=dict(env, EVMBPF_LEAF_PAIRS="1") if pairs else env)
    try:
        line = ""
        while "attached to" not in line:
            line = tracer.stderr.readline()
            assert line, "evmbpf ended before it attached"
        open(go, "w").close()
        wait_for(flag, target)
        tracer.send_signal(signal.SIGINT)
        _, err = tracer.communicate(timeout=60)
        assert tracer.returncode == 0, err
    finally:
        open(resume, "w").close()
        target.wait(timeout=60)
        if tracer.poll() is None:
            tracer.kill()
    assert target.returncode == 0
    events = load(out)
    slow = [e for e in events if e.get("module") == "2" and e["forward"] == 2]
    assert [e["event"] for e in slow] == ["enter", "unwound"], events[-6:]


def per_thread(events):
    """Each thread's module events in trace order, without what differs from run to run
    (thread ids, clocks, the trace's own counters, the call numbers: those count every
    thread's calls in the order they came); sorted, so runs compare whatever the thread
    ids were."""
    threads = {}
    for e in events:
        if e["event"] in ("enter", "exit", "unwound", "orphan"):
            e = {k: v for k, v in e.items() if k not in ("tid", "ts_ns", "i", "call")}
            parts = e.get("module", "").split(".")
            key = parts[1] if parts[0] == "blocks" and len(parts) > 1 else "main"
            threads.setdefault(key, []).append(e)
    return threads


def test_leaf_calls_on_threads_the_collector_takes(evmbpf, tmp_path):
    """Three threads, each calling its own block whose middle leaf sleeps 5-120 ms: a kept
    enter is sent with its exit, on its own when another thread makes a record first, or
    taken by the collector while the leaf sleeps on, at times just as it returns (the
    compare-and-swap on the process's state decides). In three runs each thread's events
    are those two records a call give (the default), in the same order, each call
    entered and exited once; --stats shows both ways taken."""
    workload = os.path.join(OWN_WORKLOADS, "leaf_race.py")
    out, stats = str(tmp_path / "plain.jsonl"), str(tmp_path / "plain.stats")
    tracer = launched(workload, out, False, stats=stats)
    _, err = tracer.communicate(timeout=300)
    assert tracer.returncode == 0, err
    want = per_thread(load(out))
    assert sorted(want) == ["0", "1", "2", "main"], sorted(want)
    for k in ("0", "1", "2"):
        kinds = [e["event"] for e in want[k]]
        assert kinds.count("enter") == kinds.count("exit") == 16 * 4, kinds
    taken = pairs = 0
    for run in range(3):
        out, stats = str(tmp_path / f"{run}.jsonl"), str(tmp_path / f"{run}.stats")
        tracer = launched(workload, out, True, stats=stats)
        _, err = tracer.communicate(timeout=300)
        assert tracer.returncode == 0, err
        assert per_thread(load(out)) == want, run
        with open(stats) as handle:
            counters = json.load(handle)
        assert counters["dropped_records"] == 0, counters
        taken += counters["leaf_taken"]
        pairs += counters["leaf_pairs"]
    assert taken > 0 and pairs > 0, (taken, pairs)
