"""A kernel that preempts its own code (preempt=full or lazy, PREEMPT_RT) can stop a probe's
program midway and run another thread's on the same CPU, over the per-CPU buffers and
the CPU's slot the first one was using. evmbpf reads the kernel's preemption model
(user/collector/machine/preempt.c) and, where it may preempt, each record is checked
before it goes to the ring (bpf/state.bpf.h, ps_ring): one built while another task's
program ran on its CPU is dropped and counted. EVMBPF_PREEMPT_GUARD=1 turns the check on
where the kernel does not preempt: these tests check that it keeps every record of real
runs (a check that misjudged would drop them). What they cannot make here is a
preemption inside a program: this machine's kernel does not preempt its code, and its
debugfs refuses to switch the model (lockdown)."""
import json
import os
import subprocess

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, RUN_WORKLOAD,
                            cell_target, compare_traces, load)

pytestmark = pytest.mark.root

ON = "the records' CPU check is on (EVMBPF_PREEMPT_GUARD=1)"
DROPPED = "records were dropped because another thread's probes ran on their CPU"


@pytest.mark.parametrize("where", ["host", "sid"])
def test_check_keeps_every_record(evmbpf, where, tmp_path, monkeypatch):
    """The tiny transformer with the check on: the trace equals the reference's, nothing
    dropped, and -v says the check is on."""
    monkeypatch.setenv("EVMBPF_PREEMPT_GUARD", "1")
    target = cell_target(where, tmp_path).with_outdir(tmp_path)
    if target.env is not None:
        target.env = dict(target.env, EVMBPF_PREEMPT_GUARD="1")
    path = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    ref, out = os.path.join(target.outdir, "ref.jsonl"), os.path.join(target.outdir, "got.jsonl")
    r = target.reference(path, ref)
    assert r.returncode == 0, r.stderr[-3000:]
    r = target.launch(path, out, evmbpf_args=("-v",))
    assert r.returncode == 0, r.stderr[-3000:]
    assert ON in r.stderr, r.stderr[-3000:]
    assert DROPPED not in r.stderr and "dropped in all" not in r.stderr, r.stderr[-3000:]
    compare_traces(load(ref), load(out), kwargs=target.kwargs)


def test_check_keeps_threads_records(evmbpf, tmp_path):
    """Three threads of one process calling modules at once, on both CPUs, with the check
    on: every thread's calls entered and exited, no record dropped (--stats)."""
    out, stats = str(tmp_path / "t.jsonl"), str(tmp_path / "t.stats")
    env = dict(os.environ, EVMBPF_PREEMPT_GUARD="1")
    r = subprocess.run([EVMBPF, "--out", out, "--stats", stats, "--", HOST_PYTHON, RUN_WORKLOAD,
                        os.path.join(OWN_WORKLOADS, "leaf_race.py")], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    events = load(out)
    for thread in ("0", "1", "2"):
        mine = [e["event"] for e in events if e.get("event") in ("enter", "exit")
                and e["module"].startswith(f"blocks.{thread}")]
        assert mine.count("enter") == mine.count("exit") == 16 * 4, (thread, mine[:8])
    with open(stats) as handle:
        counters = json.load(handle)
    assert counters["dropped_records"] == 0, counters
    assert DROPPED not in r.stderr, r.stderr[-3000:]


def test_doctor_and_the_tracer_agree(tmp_path):
    """`evmbpf doctor` names the kernel's preemption model and what it means; a trace with
    no EVMBPF_PREEMPT_GUARD checks its records exactly where the doctor says a program
    may be preempted."""
    env = {k: v for k, v in os.environ.items() if k != "EVMBPF_PREEMPT_GUARD"}
    r = subprocess.run([EVMBPF, "doctor"], capture_output=True, text=True, timeout=60, env=env)
    said = [ln for ln in r.stdout.splitlines() if ln[2:].startswith("kernel preemption: ")]
    assert len(said) == 1, r.stdout
    preempts = "may be preempted" in said[0]
    assert preempts or "runs to its end on its CPU" in said[0], said
    out = str(tmp_path / "t.jsonl")
    r = subprocess.run([EVMBPF, "-v", "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                        os.path.join(REF_WORKLOADS, "tiny_transformer.py")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stderr.splitlines() if "kernel preemption: " in ln]
    assert len(line) == 1, r.stderr[-3000:]
    assert ("is dropped (and counted)" in line[0]) == preempts, (said, line)
    assert said[0].split("kernel preemption: ")[1].split(":")[0] in line[0], (said, line)
