"""Modules called through their bound __call__ (no slot_tp_call): `model.__call__(x)`,
`step = model.__call__; step(**kw)`, `step(x)`, one that raises inside a child and is
caught. evmbpf's trace must equal the reference's, launched and by --pid, on the host's
CPython 3.11 and in the chroots (trixie 3.13 / torch 2.6, sid 3.14 / torch 2.14); sid's
transformers generate() is in test_matrix.py (hf_llama, hf_gpt2). CPython 3.9/3.10 are
not followed (docs/design.md)."""
import os

import pytest

from evmbpf_testlib import (OWN_WORKLOADS, Attached, chroot_ensure, chroot_target,
                            compare_traces, load, run_launch, run_reference, torch_major)

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


CHROOT_CELLS = [("sid", "raises")] + [
    pytest.param(c, s, marks=pytest.mark.skipif(not FULL, reason="EVMBPF_FULL_MATRIX=1"))
    for c in ("trixie", "sid") for s in SHAPES if (c, s) != ("sid", "raises")]


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
