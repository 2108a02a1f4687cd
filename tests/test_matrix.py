"""evmbpf across the version matrix (issue 4, DESIGN.md "Test matrix").

Cells: Debian chroots (bullseye: CPython 3.9 + torch 1.7.1, trixie: 3.13 + torch 2.6,
sid: 3.14 + torch 2.14 + transformers), built by scripts/chroot.sh when missing and
cached outside the repository; pyenv's CPython 3.9-3.13 (shared libpython) with the
stand-in torch of tests/standin. In each cell a workload is traced three ways, as in
test_trace.py: by the reference in-process tracer (inside the target's own Python), by
evmbpf launching it through a wrapper that execs Python (scripts/chroot.sh: bash,
unshare, chroot, env, sh; `env`; a shell script), and by evmbpf attached by pid. evmbpf
runs on the host and reads the target's files through /proc/PID/root.

The default run (`make test`) covers every cell with a few workloads; `make
test-matrix` (EVMBPF_FULL_MATRIX=1) adds the rest of the workloads in every chroot and a
second transformers architecture."""
import os
import re
import shutil
import stat
import subprocess

import pytest

from evmbpf_testlib import (EVMBPF, FULL_MATRIX, HOST_PYTHON, OWN_WORKLOADS, PYENV, REFERENCE,
                            REF_WORKLOADS, RUN_WORKLOAD, STANDIN_WORKLOAD, Attached, chroot_dir,
                            chroot_ensure, chroot_target, compare_traces, host_shared_target, load,
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


# Per chroot: the workloads of the default run, then the slow rest, which runs only with
# EVMBPF_FULL_MATRIX=1 (make test-matrix), so that `make test` stays short.
SLOW_MARKS = [pytest.mark.slow,
              pytest.mark.skipif(not FULL_MATRIX, reason="full matrix: EVMBPF_FULL_MATRIX=1 "
                                 "(make test-matrix)")]
# Default cells: every chroot with tiny_transformer both ways, raises, kv_cache and phases
# launched, and transformers' Llama launched in sid; the rest is the full matrix.
WORKLOADS = ["tiny_transformer", "raises", "kv_cache", "odd_values", "reentry", "phases",
             "standin_values"]
DEFAULT = {("launch", "tiny_transformer"), ("pid", "tiny_transformer"),
           ("launch", "raises"), ("launch", "kv_cache"), ("launch", "hf_llama"),
           ("launch", "phases")}
# evmbpf follows the host's phase() markers on every CPython 3.9-3.14: phases are
# compared in every cell, the marked workload's (phases) too.


# transformers 5's generate() runs its decoding steps through the model's bound __call__,
# whose return only a hardware watchpoint sees: these cells need debug registers that fire
GENERATE = {"hf_llama", "hf_gpt2"}


def cells(mode):
    pairs = [(c, w) for c in CHROOTS for w in WORKLOADS] + \
        [("sid", "hf_llama"), ("sid", "hf_gpt2")]  # transformers: sid only
    return [pytest.param(c, w, id=f"{c}-{w}",
                         marks=[*(() if (mode, w) in DEFAULT else SLOW_MARKS),
                                *((pytest.mark.debug_registers,) if w in GENERATE else ())])
            for c, w in pairs]

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

def comparable_part(workload, ref, got):
    """The whole trace: transformers 5's generate() runs its decoding steps as
    `model_forward(...)` with model_forward = model.__call__, a bound method, which
    evmbpf follows too (bpf/bound.bpf.h)."""
    return ref, got


@pytest.mark.parametrize("chroot,workload", cells("launch"))
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
    compare_traces(*comparable_part(workload, ref, got), kwargs=target.kwargs)
    assert "did not validate" not in result.stderr, result.stderr


@pytest.mark.parametrize("chroot,workload", cells("pid"))
def test_chroot_pid(evmbpf, chroot, workload, outdir):
    target = chroot_target(ensured(chroot)).with_outdir(outdir)
    path = wl(workload)
    ref, _ = reference(target, path, outdir)
    out = str(outdir / f"pid-{chroot}-{workload}.jsonl")
    run = target.attached(path, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(*comparable_part(workload, ref, load(out)), kwargs=target.kwargs)
    assert "did not validate" not in run.tracer_err, run.tracer_err


def test_host_kv_cache(evmbpf, tmp_path):
    """KV caches on the host's CPython 3.11 (values pointer / materialized dicts)."""
    path = wl("kv_cache")
    ref = str(tmp_path / "ref.jsonl")
    subprocess.run([HOST_PYTHON, RUN_WORKLOAD, path, "--trace", ref], check=True,
                   capture_output=True, timeout=300)
    out = str(tmp_path / "launch.jsonl")
    result = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD, path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    compare_traces(load(ref), load(out), kwargs=False)
    assert '"bytes": 1152' in open(out).read()
    out = str(tmp_path / "pid.jsonl")
    run = Attached(path, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(load(ref), load(out), kwargs=False)


@pytest.mark.parametrize("workload", ["tiny_transformer"] + [
    pytest.param("raises", marks=SLOW_MARKS)])
def test_host_shared_libpython(evmbpf, workload, tmp_path):
    """The host's CPython 3.11 and torch 1.13 as Debian's shared libpython3.11 (an
    embedder, tests/embed/pyshared.c): evmbpf finds the interpreter and slot_tp_call in
    libpython3.11.so.1.0 (stripped: through the slotdefs table), launched and by --pid,
    and the traces equal the reference's."""
    target = host_shared_target(tmp_path)
    if target is None:
        pytest.skip("no python3.11-config (libpython3.11-dev)")
    target.with_outdir(tmp_path)
    path = wl(workload)
    ref = str(tmp_path / "ref.jsonl")
    result = target.reference(path, ref)
    assert os.path.exists(ref), result.stderr[-3000:]
    out = str(tmp_path / "launch.jsonl")
    result = target.launch(path, out, evmbpf_args=["-v"])
    assert re.search(r"interpreter \S*/libpython3\.11\.so\.1\.0, slot_tp_call at",
                     result.stderr), result.stderr
    got = load(out)
    check_header(got, "3.11")
    compare_traces(load(ref), got, kwargs=target.kwargs)
    out = str(tmp_path / "pid.jsonl")
    run = target.attached(path, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(load(ref), load(out), kwargs=target.kwargs)


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
    wrappers = [(), ("env", "EVMBPF_WRAPPED=1"), (str(script),)]
    if version != "3.13" and not FULL_MATRIX:
        wrappers = wrappers[:1]  # the wrappers on one version in the default run
    for wrapper in wrappers:
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


# ---------------------------------------------------------------- tensor layouts

def _tensor_values(events):
    """Every described value that is a tensor: dicts with "shape" or type Tensor."""
    found = []

    def walk(v):
        if isinstance(v, dict):
            if "shape" in v or v.get("type") in ("Tensor", "Parameter"):
                found.append(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    for e in events:
        if e.get("event") in ("enter", "exit", "unwound"):
            walk([e.get("args"), e.get("kwargs"), e.get("output")])
    return found


@pytest.mark.parametrize("where", ["host", "bullseye"])
def test_wrong_layout_table_gives_type_only(evmbpf, where, tmp_path):
    """EVMBPF_TEST_WRONG_LAYOUTS (test only) shifts every offset of the known TensorImpl
    layouts: no tensor may get a shape, each is {"type": "Tensor"}, one warning."""
    env = dict(os.environ, EVMBPF_TEST_WRONG_LAYOUTS="1")
    out = str(tmp_path / "t.jsonl")
    path = wl("tiny_transformer")
    if where == "host":
        result = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD, path],
                                capture_output=True, text=True, env=env, timeout=300)
    else:
        target = chroot_target(ensured(where)).with_outdir(tmp_path)
        target.env = dict(target.env or os.environ, EVMBPF_TEST_WRONG_LAYOUTS="1")
        result = target.launch(path, out)
    assert result.returncode == 0, result.stderr
    tensors = _tensor_values(load(out))
    assert tensors and all(t == {"type": "Tensor"} for t in tensors), tensors[:5]
    warnings = [line for line in result.stderr.splitlines() if "did not validate" in line]
    assert len(warnings) == 1, result.stderr


def test_torch17_dtypes_known_after_the_process(evmbpf, tmp_path):
    """torch 1.7 keeps a dtype as a pointer to libc10's TypeMetaData record. Its name
    cannot be read once the process has gone (a --pid trace described after a short
    run ended: 1 in 12 such traces had every tensor {"type": "Tensor"}), so the records
    are found in libc10's file while it runs. EVMBPF_TEST_NO_META_READ (test only) reads
    no record's name: every dtype must still be named."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("dtypes", wl("dtypes"))
    dtypes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dtypes)
    target = chroot_target(ensured("bullseye")).with_outdir(tmp_path)
    target.env = dict(target.env or os.environ, EVMBPF_TEST_NO_META_READ="1")
    out = str(tmp_path / "t.jsonl")
    result = target.launch(wl("dtypes"), out, evmbpf_args=["-v"])
    assert result.returncode == 0, result.stderr
    assert "16 of libc10's TypeMetaData records found" in result.stderr, result.stderr
    echoed = [e["args"][0] for e in load(out) if e["event"] == "enter" and e["module"] == "echo"]
    assert [t.get("dtype") for t in echoed] == dtypes.DTYPES, echoed


# ---------------------------------------------------------------- versions refused

def _refused(result, needle):
    assert result.returncode != 0, result.stderr
    assert needle in result.stderr, result.stderr
    assert "attached to" not in result.stderr, result.stderr


def test_refuses_python38(evmbpf, tmp_path):
    python = pyenv_python("3.8")
    if not python:
        pytest.skip("no pyenv CPython 3.8")
    out = str(tmp_path / "t.jsonl")
    script = "import time; print('ready', flush=True); time.sleep(30)"
    result = subprocess.run([EVMBPF, "--out", out, "--", python, "-c", script],
                            capture_output=True, text=True, timeout=120)
    _refused(result, "3.8")
    assert not os.path.exists(out)
    target = subprocess.Popen([python, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        result = subprocess.run([EVMBPF, "--pid", str(target.pid), "--out", out],
                                capture_output=True, text=True, timeout=120)
        _refused(result, "3.8")
        assert target.poll() is None  # untouched
    finally:
        target.kill()
        target.wait()


def _patch_py_version(lib, dst, hexversion):
    """A copy of libpython whose Py_Version says hexversion (the file's bytes only)."""
    sym = subprocess.run(["nm", "-D", lib], capture_output=True, text=True).stdout
    addr = next(int(line.split()[0], 16) for line in sym.splitlines()
                if line.split()[-1] == "Py_Version")
    phdrs = subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True).stdout
    for line in phdrs.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, vaddr, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if vaddr <= addr < vaddr + filesz:
                data = bytearray(open(lib, "rb").read())
                data[addr - vaddr + off:addr - vaddr + off + 4] = hexversion.to_bytes(4, "little")
                open(dst, "wb").write(data)
                return dst
    raise AssertionError("Py_Version not in a LOAD segment")


def test_refuses_unknown_version(evmbpf, tmp_path):
    """A CPython that says it is 3.15 (3.13's libpython with Py_Version patched, loaded
    with LD_PRELOAD: same soname) is refused, by name."""
    python = pyenv_python("3.13")
    if not python:
        pytest.skip("no pyenv CPython 3.13")
    lib = os.path.join(os.path.dirname(os.path.dirname(python)), "lib", "libpython3.13.so.1.0")
    fake = _patch_py_version(lib, str(tmp_path / "libpython3.13.so.1.0"), 0x030F00F0)
    env = dict(os.environ, LD_PRELOAD=fake)
    check = subprocess.run([python, "-c", "print(1)"], capture_output=True, text=True, env=env)
    assert check.stdout.strip() == "1", check.stderr
    out = str(tmp_path / "t.jsonl")
    result = subprocess.run([EVMBPF, "--out", out, "--", python, "-c", "print(1)"],
                            capture_output=True, text=True, env=env, timeout=120)
    _refused(result, "3.15")


def test_refuses_debug_build(evmbpf, tmp_path):
    dbg = shutil.which("python3.11-dbg") or shutil.which("python3-dbg")
    if not dbg:
        pytest.skip("no Debian python3.11-dbg installed (apt-get install python3.11-dbg)")
    out = str(tmp_path / "t.jsonl")
    result = subprocess.run([EVMBPF, "--out", out, "--", dbg, "-c", "print(1)"],
                            capture_output=True, text=True, timeout=120)
    _refused(result, "debug build")


# ---------------------------------------------------------------- pid namespaces

def test_pid_namespace(evmbpf, tmp_path):
    """A target in its own pid namespace (unshare --pid): --pid takes the host's pid;
    the header says the trace's pids/tids are the host namespace's, and names the
    target's namespace and its pid there."""
    out = str(tmp_path / "t.jsonl")
    path = wl("tiny_transformer")
    run = Attached(path, out, prefix=["unshare", "--pid", "--fork", "--mount-proc"])
    assert run.pid != run.target.pid
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    events = load(out)
    tracer = events[0]["tracer"]
    assert tracer["pid"] == run.pid
    assert tracer["pid_namespace"] == os.stat("/proc/self/ns/pid").st_ino
    assert tracer["target_pid_namespace"] != tracer["pid_namespace"]
    assert tracer["target_pid"] == 1
    tids = {e["tid"] for e in events if e["event"] in ("enter", "exit")}
    assert tids == {run.pid}
    ref = str(tmp_path / "ref.jsonl")
    subprocess.run([HOST_PYTHON, RUN_WORKLOAD, path, "--trace", ref], check=True,
                   capture_output=True, timeout=300)
    compare_traces(load(ref), events, kwargs=False)



# ---------------------------------------------------------------- _Py_DebugOffsets (3.13+)

@pytest.mark.parametrize("where", ["pyenv3.13", "trixie", "sid"])
def test_debug_offsets_read(evmbpf, where, tmp_path):
    """3.13+ read _Py_DebugOffsets at the start of _PyRuntime (cookie, version) and take
    its offsets over the table's; on these builds the two agree."""
    if where.startswith("pyenv"):
        python = pyenv_python("3.13")
        if not python:
            pytest.skip("no pyenv CPython 3.13")
        cmd = [python, "-c", "pass"]
    else:
        cmd = [*chroot_target(ensured(where)).prefix, "python3", "-c", "pass"]
    result = subprocess.run([EVMBPF, "-v", "--out", str(tmp_path / "t.jsonl"), "--", *cmd],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert re.search(r"_Py_DebugOffsets 3\.1[34]: 24 fields read, 0 differ", result.stderr), \
        result.stderr


def test_debug_offsets_version_mismatch_refused(evmbpf, tmp_path):
    """A 3.13 runtime whose file says 3.14 (Py_Version patched): _Py_DebugOffsets tells."""
    python = pyenv_python("3.13")
    if not python:
        pytest.skip("no pyenv CPython 3.13")
    lib = os.path.join(os.path.dirname(os.path.dirname(python)), "lib", "libpython3.13.so.1.0")
    fake = _patch_py_version(lib, str(tmp_path / "libpython3.13.so.1.0"), 0x030E00F0)
    env = dict(os.environ, LD_PRELOAD=fake)
    result = subprocess.run([EVMBPF, "--out", str(tmp_path / "t.jsonl"), "--", python, "-c",
                             "pass"], capture_output=True, text=True, env=env, timeout=120)
    _refused(result, "_Py_DebugOffsets says 3.13")
