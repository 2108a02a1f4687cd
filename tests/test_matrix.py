"""evmbpf across the version matrix (issue 4, DESIGN.md "Test matrix").

Cells: Debian chroots (bullseye: CPython 3.9 + torch 1.7.1, trixie: 3.13 + torch 2.6,
sid: 3.14 + torch 2.14 + transformers), built by scripts/chroot.sh when missing and
cached outside the repository; pyenv's CPython 3.9-3.13 (shared libpython) with the
stand-in torch of tests/standin. In each cell a workload is traced three ways, as in
test_trace.py: by the reference in-process tracer (inside the target's own Python), by
evmbpf launching it through a wrapper that execs Python (scripts/chroot.sh: bash,
unshare, chroot, env, sh; `env`; a shell script), and by evmbpf attached by pid. evmbpf
runs on the host and reads the target's files through /proc/PID/root.

The default run covers every cell with a few workloads; `-m slow` (make test-matrix)
adds the rest of the workloads in every chroot."""
import os
import re
import shutil
import stat
import subprocess

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, PYENV, REF_WORKLOADS,
                            REFERENCE, RUN_WORKLOAD, STANDIN_WORKLOAD, Attached,
                            chroot_dir, chroot_ensure, chroot_target, compare_traces, load,
                            pyenv_python, pyenv_target)

pytestmark = pytest.mark.root

CHROOTS = ["bullseye", "trixie", "sid"]
PYENVS = ["3.9", "3.10", "3.11", "3.12", "3.13"]


def wl(name):
    for base in (REF_WORKLOADS, OWN_WORKLOADS):
        path = os.path.join(base, name + ".py")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(name)


# Per chroot: the workloads of the default run, then the slow rest.
FAST = ["tiny_transformer", "raises", "odd_values"]
SLOW = ["reentry", "phases", "standin_values"]
PHASE_AWARE = {"phases"}
CHROOT_CELLS = [pytest.param(c, w, id=f"{c}-{w}") for c in CHROOTS for w in FAST] + \
    [pytest.param(c, w, id=f"{c}-{w}", marks=pytest.mark.slow) for c in CHROOTS for w in SLOW]


_built = {}


def ensured(name):
    if name not in _built:
        _built[name] = chroot_ensure(name)
    if _built[name]:
        pytest.fail(f"cannot build the {name} chroot: {_built[name]}")
    return name


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    return tmp_path_factory.mktemp("matrix")


_refs = {}


def reference(target, workload, outdir):
    key = (target.name, workload)
    if key not in _refs:
        path = os.path.join(target.outdir, f"ref-{target.name}-{os.path.basename(workload)}.jsonl")
        if os.path.exists(path):
            os.unlink(path)
        result = target.reference(workload, path)
        assert os.path.exists(path), f"no reference trace: {result.stderr[-3000:]}"
        _refs[key] = (load(path), result.returncode)
    return _refs[key]


def check_header(events, target_python=None, torch_version=None):
    header = events[0]
    assert header["event"] == "header"
    tracer = header["tracer"]
    assert tracer["name"] == "evmbpf"
    if target_python:
        assert tracer["python"] == target_python
    if torch_version:
        assert header["torch"] == torch_version


_versions = {}


def versions(target):
    """(python X.Y, torch.__version__) as the target reports them."""
    if target.name not in _versions:
        r = subprocess.run([*target.prefix, target.python, "-c",
                            "import sys, torch; print('%d.%d' % sys.version_info[:2]); "
                            "print(getattr(torch, '__version__', ''))"],
                           capture_output=True, text=True, env=target.env, timeout=300)
        lines = r.stdout.split()
        _versions[target.name] = (lines[0], lines[1] if len(lines) > 1 else None)
    return _versions[target.name]


# ---------------------------------------------------------------- chroots

@pytest.mark.parametrize("chroot,workload", CHROOT_CELLS)
def test_chroot_launch(evmbpf, chroot, workload, outdir):
    target = chroot_target(ensured(chroot)).with_outdir(outdir)
    path = wl(workload)
    ref, ref_rc = reference(target, path, outdir)
    out = str(outdir / f"launch-{chroot}-{workload}.jsonl")
    result = target.launch(path, out)
    assert "attached to" in result.stderr, result.stderr
    assert result.returncode == ref_rc, result.stderr
    got = load(out)
    py, torch_version = versions(target)
    check_header(got, py, torch_version)
    compare_traces(ref, got, kwargs=target.kwargs, phase=workload not in PHASE_AWARE)
    assert "did not validate" not in result.stderr, result.stderr


@pytest.mark.parametrize("chroot,workload", CHROOT_CELLS)
def test_chroot_pid(evmbpf, chroot, workload, outdir):
    target = chroot_target(ensured(chroot)).with_outdir(outdir)
    path = wl(workload)
    ref, _ = reference(target, path, outdir)
    out = str(outdir / f"pid-{chroot}-{workload}.jsonl")
    run = target.attached(path, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(ref, load(out), kwargs=target.kwargs, phase=workload not in PHASE_AWARE)
    assert "did not validate" not in run.tracer_err, run.tracer_err


def test_chroot_direct(evmbpf, tmp_path):
    """`chroot DIR python3 ...` straight, no /proc or binds inside: the files the
    target needs are copied into the chroot's /tmp."""
    name = ensured("trixie")
    root = chroot_dir(name)
    inside = tmp_path.name
    guest_dir = os.path.join(root, "tmp", "evmbpf-" + inside)
    shutil.copytree(REFERENCE, guest_dir, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        shutil.copy(wl("tiny_transformer"), os.path.join(guest_dir, "w.py"))
        g = "/tmp/evmbpf-" + inside
        ref = os.path.join(guest_dir, "ref.jsonl")
        subprocess.run(["chroot", root, "python3", g + "/run_workload.py", g + "/w.py",
                        "--trace", g + "/ref.jsonl"], capture_output=True, timeout=300)
        out = str(tmp_path / "got.jsonl")
        result = subprocess.run([EVMBPF, "--out", out, "--", "chroot", root, "python3",
                                 g + "/run_workload.py", g + "/w.py"],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        compare_traces(load(ref), load(out))
    finally:
        shutil.rmtree(guest_dir, ignore_errors=True)


# ---------------------------------------------------------------- pyenv + stand-in torch

def pyenv_or_skip(version):
    target = pyenv_target(version)
    if not target:
        pytest.skip(f"no pyenv CPython {version} under {PYENV}")
    return target


@pytest.mark.parametrize("version", PYENVS)
def test_pyenv_standin(evmbpf, version, tmp_path):
    """Launch plainly, through `env`, through a shell script that execs; and by pid."""
    target = pyenv_or_skip(version).with_outdir(tmp_path)
    ref, ref_rc = reference(target, STANDIN_WORKLOAD, tmp_path)
    assert ref_rc == 0
    script = tmp_path / "wrap.sh"
    script.write_text('#!/bin/sh\nexport EVMBPF_WRAPPED=1\nexec "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    for wrapper in ((), ("env", "EVMBPF_WRAPPED=1"), (str(script),)):
        out = str(tmp_path / f"launch-{len(wrapper)}.jsonl")
        result = target.launch(STANDIN_WORKLOAD, out, wrapper=wrapper)
        assert result.returncode == 0, (wrapper, result.stderr)
        got = load(out)
        assert got[0]["tracer"]["python"] == version
        compare_traces(ref, got, kwargs=target.kwargs)
    out = str(tmp_path / "pid.jsonl")
    run = target.attached(STANDIN_WORKLOAD, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(ref, load(out), kwargs=target.kwargs)


@pytest.mark.parametrize("version", PYENVS)
def test_pyenv_uncaught_error(evmbpf, version, tmp_path):
    """The `error` event (PyErr_Display) on each version: type, message, traceback."""
    target = pyenv_or_skip(version).with_outdir(tmp_path)
    path = wl("standin_raises")
    ref, ref_rc = reference(target, path, tmp_path)
    assert ref_rc != 0 and any(e["event"] == "error" for e in ref), ref[-3:]
    out = str(tmp_path / "got.jsonl")
    result = target.launch(path, out)
    assert result.returncode == ref_rc, result.stderr
    got = load(out)
    compare_traces(ref, got, kwargs=target.kwargs)
    error = next(e for e in got if e["event"] == "error")
    want = next(e for e in ref if e["event"] == "error")
    assert error["message"] == want["message"]

    def frames(tb):
        """The workload's frames, "File ..., line N, in F" (3.11+ adds ^^^ markers; the
        reference's hooks take other paths through torch's frames than a plain run)."""
        return [line.splitlines()[0] for line in tb if line.startswith("  File") and
                "/workloads/" in line]
    assert frames(error["traceback"]) == frames(want["traceback"])
