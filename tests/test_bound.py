"""Modules called through their bound __call__ (no slot_tp_call): `model.__call__(x)`,
`step = model.__call__; step(**kw)`, `step(x)`, one that raises inside a child and is
caught. evmbpf's trace must equal the reference's, launched and by --pid, on the host's
CPython 3.11 and in the chroots (trixie 3.13 / torch 2.6, sid 3.14 / torch 2.14); sid's
transformers generate() is in test_matrix.py (hf_llama, hf_gpt2); bullseye 3.9 / torch 1.7
and pyenv's 3.9/3.10 with the stand-in torch (frames are PyFrameObjects there)."""
import os

import pytest

from evmbpf_testlib import (OWN_WORKLOADS, Attached, chroot_ensure, chroot_target,
                            compare_traces, load, pyenv_target, run_launch, run_reference,
                            torch_major)
from numeric_compare import compare_numeric

pytestmark = pytest.mark.root

SHAPES = ["dunder", "kwargs", "positional", "raises"]
KWARGS = torch_major() >= 2
FULL = os.environ.get("EVMBPF_FULL_MATRIX") == "1"


def workload(shape):
    return os.path.join(OWN_WORKLOADS, f"bound_{shape}.py")


def full(*values, default=()):
    """The cells of the default run, then the rest behind EVMBPF_FULL_MATRIX=1."""
    skip = pytest.mark.skipif(not FULL, reason="EVMBPF_FULL_MATRIX=1")
    return [v if v in default else pytest.param(v, marks=skip) for v in values]


@pytest.mark.parametrize("shape", full(*SHAPES, default=("kwargs", "raises")))
def test_host_launch(evmbpf, shape, tmp_path):
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert run_reference(workload(shape), ref).returncode == 0
    result = run_launch(workload(shape), out)
    assert result.returncode == 0, result.stderr
    got = load(out)
    # the bound calls were seen: one forward per call, as the reference writes
    assert sum(e["event"] == "forward" for e in got) >= 5
    compare_traces(load(ref), got, kwargs=KWARGS)


@pytest.mark.parametrize("shape", full("kwargs", "raises", default=("kwargs",)))
def test_host_pid(evmbpf, shape, tmp_path):
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert run_reference(workload(shape), ref).returncode == 0
    run = Attached(workload(shape), out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(load(ref), load(out), kwargs=KWARGS)


def test_host_numeric(evmbpf, tmp_path):
    """--numeric: a bound call's args and its output (read at the watchpoint, the thread
    held there) carry the reference's stats."""
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert run_reference(workload("kwargs"), ref, extra=["--numeric"]).returncode == 0
    result = run_launch(workload("kwargs"), out, evmbpf_args=["--numeric"])
    assert result.returncode == 0, result.stderr
    got = load(out)
    assert sum(e["event"] == "forward" for e in got) >= 5
    compare_numeric(load(ref), got, kwargs=KWARGS)


# the default run has sid's generate() below; every shape in trixie and sid is the full run
CHROOT_CELLS = [
    pytest.param(c, s, marks=pytest.mark.skipif(not FULL, reason="EVMBPF_FULL_MATRIX=1"))
    for c in ("trixie", "sid") for s in SHAPES]


@pytest.mark.parametrize("chroot,shape", CHROOT_CELLS)
def test_chroot_launch(evmbpf, chroot, shape, tmp_path):
    error = chroot_ensure(chroot)
    if error:
        pytest.fail(f"cannot build the {chroot} chroot: {error}")
    target = chroot_target(chroot).with_outdir(tmp_path)
    ref = os.path.join(target.outdir, "ref.jsonl")
    out = os.path.join(target.outdir, "got.jsonl")
    result = target.reference(workload(shape), ref)
    assert result.returncode == 0, result.stderr[-3000:]
    result = target.launch(workload(shape), out)
    assert result.returncode == 0, result.stderr
    compare_traces(load(ref), load(out), kwargs=target.kwargs)


GENERATE_CELLS = [("launch", "hf_llama_generate")] + [
    pytest.param(m, w, marks=pytest.mark.skipif(not FULL, reason="EVMBPF_FULL_MATRIX=1"))
    for m, w in (("pid", "hf_llama_generate"), ("launch", "hf_gpt2_generate"),
                 ("pid", "hf_gpt2_generate"))]


@pytest.mark.parametrize("mode,name", GENERATE_CELLS)
def test_sid_generate(evmbpf, mode, name, tmp_path):
    """transformers 5's greedy generate() for a batch of two with an attention mask: every
    decoding step after the prefill is a bound call; the whole trace equals the
    reference's."""
    error = chroot_ensure("sid")
    if error:
        pytest.fail(f"cannot build the sid chroot: {error}")
    target = chroot_target("sid").with_outdir(tmp_path)
    path = os.path.join(OWN_WORKLOADS, name + ".py")
    ref = os.path.join(target.outdir, "ref.jsonl")
    out = os.path.join(target.outdir, "got.jsonl")
    result = target.reference(path, ref)
    assert result.returncode == 0, result.stderr[-3000:]
    if mode == "launch":
        result = target.launch(path, out)
        assert result.returncode == 0, result.stderr
    else:
        run = target.attached(path, out)
        run.release()
        run.finish()
        assert run.tracer_rc == 0, run.tracer_err
    got = load(out)
    assert sum(e["event"] == "forward" for e in got) == 4  # the prefill and 3 steps
    compare_traces(load(ref), got, kwargs=True)


@pytest.mark.parametrize("shape", full(*SHAPES, default=("positional",)))
def test_bullseye_launch(evmbpf, shape, tmp_path):
    """CPython 3.9 (bullseye, torch 1.7): frames are PyFrameObjects; every shape equals
    the reference (no kwargs on torch 1.7)."""
    error = chroot_ensure("bullseye")
    if error:
        pytest.fail(f"cannot build the bullseye chroot: {error}")
    target = chroot_target("bullseye").with_outdir(tmp_path)
    ref = os.path.join(target.outdir, "ref.jsonl")
    out = os.path.join(target.outdir, "got.jsonl")
    result = target.reference(workload(shape), ref)
    assert result.returncode == 0, result.stderr[-3000:]
    result = target.launch(workload(shape), out)
    assert result.returncode == 0, result.stderr
    assert "not traced" not in result.stderr, result.stderr
    got = load(out)
    assert sum(e["event"] == "forward" for e in got) >= 5
    compare_traces(load(ref), got, kwargs=target.kwargs)


PYENV_CELLS = [("3.10", "kwargs")] + [
    pytest.param(v, s, marks=pytest.mark.skipif(not FULL, reason="EVMBPF_FULL_MATRIX=1"))
    for v in ("3.9", "3.10") for s in SHAPES if (v, s) != ("3.10", "kwargs")]


@pytest.mark.parametrize("version,shape", PYENV_CELLS)
def test_pyenv_standin(evmbpf, version, shape, tmp_path):
    """pyenv's CPython 3.9/3.10 with the stand-in torch (tests/standin): the same call
    shapes on plain values, launched, equal to the reference."""
    target = pyenv_target(version)
    if target is None:
        pytest.skip(f"pyenv has no CPython {version}")
    target.env["BOUND_SHAPE"] = shape
    target.with_outdir(tmp_path)
    path = os.path.join(OWN_WORKLOADS, "bound_standin.py")
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    result = target.reference(path, ref)
    assert result.returncode == 0, result.stderr[-3000:]
    result = target.launch(path, out)
    assert result.returncode == 0, result.stderr
    got = load(out)
    assert sum(e["event"] == "forward" for e in got) >= 5
    compare_traces(load(ref), got, kwargs=True)


def test_pyenv_standin_pid(evmbpf, tmp_path):
    """--pid on CPython 3.10: the bound calls after the attach are traced."""
    target = pyenv_target("3.10")
    if target is None:
        pytest.skip("pyenv has no CPython 3.10")
    target.env["BOUND_SHAPE"] = "raises"
    target.with_outdir(tmp_path)
    path = os.path.join(OWN_WORKLOADS, "bound_standin.py")
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert target.reference(path, ref).returncode == 0
    run = target.attached(path, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(load(ref), load(out), kwargs=True)
