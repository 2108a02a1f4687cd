"""Machines whose hardware breakpoints never fire (a paravirtual guest whose hypervisor
does not pass the debug registers through accepts a breakpoint and never fires it).
evmbpf's self-test finds that once per run; it then follows no note_samples() and no
bound __call__ (both rest on breakpoints), says so once on stderr, marks the trace (the
header's tracer.watch, and a closing `unobservable` line, since a --tail trace may have
lost its header), and writes nothing guessed: every event is one the reference writes
too. The readers then say "not observable on this machine" where they would say "none
recorded". Run on every machine: where breakpoints fire, EVMBPF_TEST_NO_DEBUG_REGISTERS=1
makes the self-test say they do not."""
import json
import os
import subprocess

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, RUN_WORKLOAD,
                            cell_target, debug_registers, load)

pytestmark = pytest.mark.root

FORCE = "EVMBPF_TEST_NO_DEBUG_REGISTERS"
WARNING = "warning: hardware breakpoints do not fire on this machine"
KEYS = ("event", "module", "type", "args", "output", "kwargs")


def forced(env=None):
    return dict(env or os.environ, **{FORCE: "1"})


def reader(*args):
    r = subprocess.run([EVMBPF, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def check_marked(events, stderr):
    """Said once, and marked in the header and at the end."""
    assert stderr.count(WARNING) == 1, stderr
    assert "note_samples" in stderr and "bound __call__" in stderr, stderr
    header = events[0]
    assert header["event"] == "header", header
    assert header["tracer"]["watch"] == {"debug_registers": "do not fire",
                                         "note_samples": "not observable",
                                         "bound_calls": "not followed"}, header["tracer"]
    last = events[-1]
    assert last["event"] == "unobservable" and last["what"] == ["note_samples", "bound_calls"]
    assert "EVMBPF_TEST_NO_DEBUG_REGISTERS=1" in last["detail"], last


def module_calls(events, skip_forwards=(), skip_modules=()):
    """The enters and exits, with what they were called with and returned, leaving out
    the root's calls in skip_forwards and the calls of skip_modules."""
    out = []
    for e in events:
        if e.get("event") not in ("enter", "exit"):
            continue
        if e["module"] in skip_modules or (e["depth"] == 0 and e["forward"] in skip_forwards):
            continue
        out.append({k: e[k] for k in KEYS if k in e})
    return out


# ------------------------------------------------------------------ doctor, header


def test_doctor_says_it():
    r = subprocess.run([EVMBPF, "doctor"], capture_output=True, text=True, timeout=60,
                       env=forced())
    line = [ln for ln in r.stdout.splitlines() if ln[2:].startswith("hardware breakpoints:")]
    assert len(line) == 1 and line[0].startswith("✗ hardware breakpoints: do not fire on "
                                                 "this machine"), r.stdout
    assert "documents in flight" in line[0] and "another machine" in line[0], line
    assert r.returncode == 1
    others = [ln for ln in r.stdout.splitlines() if ln.startswith("✗") and ln not in line]
    if not others:
        assert r.stderr.strip() == ("evmbpf: 1 check failed: a trace works, without what the "
                                    "✗ line says"), r.stderr


def test_header_agrees_with_the_self_test(tmp_path):
    """Unforced, on whatever machine this is: the trace's header says what doctor says."""
    fire, _ = debug_registers()
    out = str(tmp_path / "t.jsonl")
    r = subprocess.run([EVMBPF, "-q", "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                        os.path.join(REF_WORKLOADS, "tiny_transformer.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = load(out, marks=True)
    watch = events[0]["tracer"]["watch"]
    assert (watch["debug_registers"] == "fire") == fire, (watch, fire)
    assert (WARNING in r.stderr) == (not fire), r.stderr
    assert (events[-1]["event"] == "unobservable") == (not fire)


# ------------------------------------------------------------------ bound calls


# one cell per interpreter family: frames as PyFrameObjects (3.9/3.10), the 3.11/3.12
# interpreter frames, 3.13+ (stack references, a C loop per forward)
@pytest.mark.parametrize("where,shape", [("host", "kwargs"), ("host", "substep"),
                                         ("pyenv3.10", "kwargs"), ("trixie", "kwargs")])
def test_bound_calls_not_followed(where, shape, tmp_path):
    """The bound calls are not followed, and nothing is guessed: the module calls written
    are the reference's, less the bound calls' own enters and exits (the roots of the
    three decoding-like steps; inner.first called as `step(h)`), with what each was
    called with and returned."""
    target = cell_target(where).with_outdir(tmp_path)
    path = os.path.join(OWN_WORKLOADS, f"bound_{shape}.py")
    ref = os.path.join(target.outdir, "ref.jsonl")
    out = os.path.join(target.outdir, "got.jsonl")
    r = target.reference(path, ref)
    assert r.returncode == 0, r.stderr[-3000:]
    target.env = forced(target.env)
    r = target.launch(path, out)
    assert r.returncode == 0, r.stderr
    ref, got = load(ref), load(out, marks=True)
    check_marked(got, r.stderr)
    keys = KEYS if target.kwargs else KEYS[:-1]
    ref_forwards = [e["forward"] for e in ref if e["event"] == "forward"]
    if shape == "kwargs":
        # model(x), three steps through `step = model.__call__`, model(x)
        assert len(ref_forwards) == 5
        want = module_calls(ref, skip_forwards=ref_forwards[1:-1])
        assert sum(e["event"] == "forward" for e in got) == 2
    else:
        want = module_calls(ref, skip_modules={"inner.first"})
        assert sum(e["event"] == "forward" for e in got) == len(ref_forwards)
    have = module_calls(got)
    strip = [k for k in KEYS if k not in keys]
    for e in want + have:
        for k in strip:
            e.pop(k, None)
    assert len(want) > 10
    assert have == want


# ------------------------------------------------------------------ documents in flight


def test_samples_not_observable(tmp_path):
    """An eval loop that declares its batches: no forward carries samples, and the
    readers say the documents were not observable rather than that there were none;
    `forwards --json` keeps the reference's shape."""
    out = str(tmp_path / "got.jsonl")
    ref = str(tmp_path / "ref.jsonl")
    path = os.path.join(OWN_WORKLOADS, "samples_eval.py")
    r = subprocess.run([HOST_PYTHON, RUN_WORKLOAD, path, "--trace", ref], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD, path],
                       capture_output=True, text=True, timeout=300, env=forced())
    assert r.returncode == 0, r.stderr
    got = load(out, marks=True)
    check_marked(got, r.stderr)
    forwards = [e for e in got if e["event"] == "forward"]
    assert forwards and all(e["samples"] is None and e["batch_rows"] is None for e in forwards)
    assert any(e["samples"] for e in load(ref) if e["event"] == "forward")
    lines = reader("forwards", out).splitlines()
    assert len(lines) == len(forwards)
    assert all(ln.endswith("not observable on this machine") for ln in lines), lines
    mine, theirs = json.loads(reader("forwards", out, "--json")), \
        json.loads(reader("forwards", ref, "--json"))
    assert [sorted(f) for f in mine] == [sorted(f) for f in theirs]
    assert all(f["samples"] is None for f in mine)


def test_tail_trace_says_it_without_its_header(tmp_path):
    """A --tail trace whose header was pushed out: the closing line alone marks it, and
    summarize's failure says the documents in flight were not observable."""
    out = str(tmp_path / "got.jsonl")
    env = forced(dict(os.environ, FAULT_DIE="raise", FAULT_AT="3"))
    r = subprocess.run([EVMBPF, "--tail", "20", "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                        os.path.join(OWN_WORKLOADS, "fault_model.py")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1, r.stderr
    events = load(out, marks=True)
    assert events[0]["event"] != "header" and events[-1]["event"] == "unobservable"
    assert r.stderr.count(WARNING) == 1
    text = reader("summarize", out)
    assert "FAILED in phase" in text, text
    assert "  documents in flight: not observable on this machine\n" in text, text
    # the same trace less its mark reads as the reference's: none recorded
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(e) + "\n" for e in events[:-1]))
    text = reader("summarize", str(plain))
    assert "  documents in flight: none recorded (a batch-size probe, or a document " \
        "already on disk)\n" in text, text
