"""One loaded BPF object for every traced process of the same Python: the verifier runs once
per Python build in a session, each process gets its own slot (its state, its ring buffer)
and its own uprobes on the same programs. Real jobs traced by the real programs; traces
compared with the reference tracer's."""
import glob
import os
import re
import subprocess

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, RUN_WORKLOAD,
                            STANDIN, compare_traces, load, pyenv_python, run_reference,
                            torch_major)

pytestmark = pytest.mark.root  # runs the tracer: loads BPF programs

JOB = os.path.join(OWN_WORKLOADS, "ranks_job.py")


def objects_loaded(stderr):
    """How many objects the verifier checked (-v: one "instructions verified" line each)."""
    return len(re.findall(r"^evmbpf: instructions verified: \d+ in all", stderr, re.M))


def test_ranks_share_one_object(tmp_path):
    """--follow of a 2-rank spawn job whose ranks each fork a worker: the launcher, its
    resource tracker, both ranks and both workers (6 processes of one Python) are served
    by one object, verified once; each rank's trace is the reference's."""
    tmp = str(tmp_path)
    refdir = os.path.join(tmp, "ref")
    os.makedirs(refdir)
    r = subprocess.run([HOST_PYTHON, JOB, refdir, "--port", "29941", "--world", "2",
                        "--reference"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    outdir = os.path.join(tmp, "ev")
    os.makedirs(outdir)
    r = subprocess.run([EVMBPF, "-v", "--follow", "--out", os.path.join(outdir, "t-%p.jsonl"),
                        "--", HOST_PYTHON, JOB, outdir, "--port", "29942", "--world", "2",
                        "--fork-worker"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    traced = glob.glob(os.path.join(outdir, "t-*.jsonl"))
    assert len(traced) == 6, traced
    assert objects_loaded(r.stderr) == 1, r.stderr[-3000:]
    shares = re.findall(r"^evmbpf: (\d+) shares BPF object 1, slot (\d+)", r.stderr, re.M)
    assert len(shares) == 5, r.stderr[-3000:]
    # each its own slot while it lives: a slot serves another only after its process ended
    lines = r.stderr.splitlines()
    holder = {}
    for k, line in enumerate(lines):
        m = re.match(r"evmbpf: (\d+)(?: shares BPF object 1|: BPF object 1 loaded), slot (\d+)",
                     line)
        if not m:
            continue
        pid, slot = m.groups()
        if slot in holder:
            before, at = holder[slot]
            assert any(l.startswith(f"{before}: trace in ") for l in lines[at:k]), (
                f"slot {slot} served {pid} while {before} lived:\n" + r.stderr[-3000:])
        holder[slot] = (pid, k)
    for rank in range(2):
        with open(os.path.join(outdir, f"rank{rank}.pid")) as handle:
            pid = int(handle.read())
        got = load(os.path.join(outdir, f"t-{pid}.jsonl"))
        assert got[0]["tracer"]["pid"] == pid
        compare_traces(load(os.path.join(refdir, f"ref-rank{rank}.jsonl")), got)


LAUNCHER = """
import subprocess, sys
for cmd in sys.argv[1:]:
    subprocess.run(cmd.split("\\x1f"), check=True)
"""


def test_slot_reused_starts_clean(tmp_path):
    """A launcher runs one workload after the other: the second process gets the slot
    the first left (the launcher keeps the object alive), and each trace equals the
    reference's: nothing of the first (type verdicts, marker state, counters, its hold)
    is seen by the second. A Python of another build, started last, gets an object of its
    own."""
    tmp = str(tmp_path)
    first = os.path.join(REF_WORKLOADS, "phases.py")
    second = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    refs = []
    for i, workload in enumerate((first, second)):
        ref = os.path.join(tmp, f"ref{i}.jsonl")
        r = run_reference(workload, ref)
        assert r.returncode == 0, r.stderr
        refs.append(load(ref))
    cmds = ["\x1f".join([HOST_PYTHON, RUN_WORKLOAD, w]) for w in (first, second)]
    other = pyenv_python("3.12")
    if other:  # with the stand-in torch (through env: an exec, followed)
        cmds.append("\x1f".join(["/usr/bin/env", "PYTHONPATH=" + STANDIN, other, "-c",
                                 "import torch"]))
    outdir = os.path.join(tmp, "ev")
    os.makedirs(outdir)
    r = subprocess.run([EVMBPF, "-v", "--follow", "--out", os.path.join(outdir, "t-%p.jsonl"),
                        "--", HOST_PYTHON, "-c", LAUNCHER, *cmds],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    shares = re.findall(r"^evmbpf: (\d+) shares BPF object 1, slot (\d+)", r.stderr, re.M)
    assert len(shares) == 2, r.stderr[-3000:]
    assert shares[0][1] == shares[1][1], shares  # the same slot, one after the other
    assert objects_loaded(r.stderr) == (2 if other else 1), r.stderr[-3000:]
    for (pid, _), ref in zip(shares, refs):
        got = load(os.path.join(outdir, f"t-{pid}.jsonl"))
        assert got[0]["tracer"]["pid"] == int(pid)
        assert not [e for e in got if e["event"] in ("dropped", "error")]
        compare_traces(ref, got, kwargs=torch_major() >= 2)


def test_no_state_outside_the_slots():
    """Every process of an object has its state in its slot of `procs`: a writable global
    anywhere else (.bss, .data) would compile, and be shared by every process the object
    serves. The object's BTF names what those sections hold."""
    obj = os.path.join(os.path.dirname(EVMBPF), "evmbpf.bpf.o")
    if not os.path.exists(obj):
        pytest.skip(f"no {obj} beside {EVMBPF}")
    r = subprocess.run(["bpftool", "btf", "dump", "file", obj], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    writable, section = set(), None
    for line in r.stdout.splitlines():
        m = re.match(r"\[\d+\] DATASEC '([^']+)'", line)
        if m:
            section = m.group(1)
            continue
        if not line.startswith("\t"):
            section = None
        m = re.search(r"\(VAR '(\w+)'\)", line)
        if m and section in (".bss", ".data"):
            writable.add(m.group(1))
    # the slots, and each CPU's last slot, its tgid (a cache of the tgid -> slot lookup)
    # and the running task's pid_tgid; and the object's count of records the preemption
    # check dropped (no process's state: which process a mixed record was is not known)
    assert writable == {"procs", "cur", "preempted_records"}, writable
