"""Shared helpers for the end-to-end tests: run workloads plainly, under the reference
tracer and under evmbpf (launch and --pid), and compare traces event by event."""
import functools
from contextlib import contextmanager
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))
REFERENCE = os.path.join(SHARED, "reference")
RUN_WORKLOAD = os.path.join(REFERENCE, "run_workload.py")
REF_WORKLOADS = os.path.join(REFERENCE, "workloads")
OWN_WORKLOADS = os.path.join(ROOT, "tests", "workloads")
EVMBPF = os.environ.get("EVMBPF", os.path.join(ROOT, "build", "evmbpf"))
# the tests' aids (tests/aids/, `make test-aids`): beside the evmbpf under test
TEST_AIDS = os.environ.get("EVMBPF_TEST_AIDS",
                           os.path.join(os.path.dirname(EVMBPF), "evmbpf-test-aids"))
# the CUPTI agent (--cupti): beside the evmbpf under test, where evmbpf looks for it first
AGENT = os.path.join(os.path.dirname(EVMBPF), "evmbpf-cupti.so")
# the fuzz harnesses and the readers' sanitizer build: where `make -C tests fuzz-build`
# puts them, beside the evmbpf under test (OUT=DIR/fuzz for another build's), so that
# the readers checked are that build's
FUZZ_BUILD = os.path.join(os.path.dirname(EVMBPF), "fuzz")
# the slow cells, workloads and trials too (make test-matrix)
FULL_MATRIX = os.environ.get("EVMBPF_FULL_MATRIX") == "1"
HOST_PYTHON = "/usr/bin/python3.11"

# The keys the in-process tracer and evmbpf must agree on (the list).
COMPARED = ("event", "module", "type", "depth", "forward", "call", "phase", "args",
            "output", "reason", "deepest", "orphan", "kwargs")


_DEBUG_REGISTERS = []


def debug_registers():
    """(fire, why): whether hardware breakpoints fire on this machine, by evmbpf's own
    self-test (the `hardware breakpoints` line of `evmbpf doctor`), run once. Without
    them evmbpf follows no bound __call__ and no note_samples(), and says so."""
    if not _DEBUG_REGISTERS:
        r = subprocess.run([EVMBPF, "doctor"], capture_output=True, text=True, timeout=60)
        line = next((ln for ln in r.stdout.splitlines()
                     if ln[2:].startswith("hardware breakpoints:")), None)
        if line is None:
            raise AssertionError("evmbpf doctor printed no hardware breakpoints line:\n"
                                 + r.stdout + r.stderr)
        why = line.split("(", 1)[1].split(")", 1)[0] if "(" in line else line
        _DEBUG_REGISTERS.extend([line.startswith("✓"), why])
    return tuple(_DEBUG_REGISTERS)


NO_DEBUG_REGISTERS = "warning: hardware breakpoints do not fire on this machine"


def without_machine_notes(stderr):
    """evmbpf's stderr without the line that says what this machine cannot watch (said
    once per run where breakpoints do not fire): what a test about something else checks."""
    return "\n".join(ln for ln in stderr.splitlines() if NO_DEBUG_REGISTERS not in ln)


MARKS = ("unobservable", "recorded")


def load(path, marks=False):
    """A trace's events. Without marks=True, not the closing lines that are marks on the
    trace, not events of the work: the one evmbpf writes where hardware breakpoints never
    fire ({"event": "unobservable"}; tests/test_machines.py checks it), and evmbpf
    record's ({"event": "recorded"}: why it wrote the file; tests/test_record.py), so a
    test of something else reads the trace as it reads one written without them."""
    with open(path) as handle:
        events = [json.loads(line) for line in handle if line.strip()]
    return events if marks else [e for e in events if e.get("event") not in MARKS]


def recorded_why(path):
    """evmbpf record's closing mark: why it wrote this file (None: no mark)."""
    marks = [e for e in load(path, marks=True) if e.get("event") == "recorded"]
    return marks[-1]["why"] if marks else None


def run_evmbpf(*args, binary=EVMBPF, env=None, timeout=120):
    """evmbpf (or a build of its readers: binary) with these arguments, its output as text."""
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command's name (which may hold spaces and
    parentheses): [0] the state, [2] the process group, [4] the terminal, [5] its foreground
    group, [11] and [12] the user and system CPU ticks."""
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def proc_state(pid):
    """The process's state letter ("T": stopped)."""
    return proc_stat(pid)[0]


def run_reference(workload, out, python=HOST_PYTHON, extra=(), env=None, prefix=()):
    cmd = [*prefix, python, RUN_WORKLOAD, workload, "--trace", out, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def run_launch(workload, out, python=HOST_PYTHON, extra=(), evmbpf_args=(), env=None,
               prefix=()):
    cmd = [EVMBPF, "--out", out, *evmbpf_args, "--", *prefix, python, RUN_WORKLOAD, workload,
           *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


class Attached:
    """A workload started with --wait-for, evmbpf attached by --pid, then released."""

    def __init__(self, workload, out, python=HOST_PYTHON, extra=(), evmbpf_args=(), env=None,
                 prefix=(), pid_args=None):
        # pid_args(pid): the --pid options (default: --pid PID)
        self.pid_args = pid_args or (lambda pid: ["--pid", str(pid)])
        self.dir = tempfile.mkdtemp(prefix="evmbpf-attach-")
        self.go = os.path.join(self.dir, "go")
        self._start([*prefix, python, RUN_WORKLOAD, workload, "--wait-for", self.go, *extra],
                    out, evmbpf_args, env)

    def _start(self, cmd, out, evmbpf_args, env):
        """Start cmd (a workload waiting for self.go), then attach evmbpf to its Python."""
        self.target = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=env)
        line = self.target.stdout.readline()
        match = re.match(r"ready pid=(\d+)", line)
        if not match:
            self.target.kill()
            raise RuntimeError(f"workload did not start: {line!r} {self.target.stderr.read()}")
        # the pid the workload prints is in its own namespace; find the host's
        self.pid = host_pid_of(self.target.pid, int(match.group(1)))
        pid_args = getattr(self, "pid_args", lambda pid: ["--pid", str(pid)])
        self.tracer = subprocess.Popen([EVMBPF, *pid_args(self.pid), "--out", out,
                                        *evmbpf_args],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.attached_line = wait_for_line(self.tracer.stderr, "attached to", 60)

    def release(self):
        open(self.go, "w").close()

    def finish(self, timeout=300):
        out, err = self.target.communicate(timeout=timeout)
        tout, terr = self.tracer.communicate(timeout=60)
        self.target_rc, self.target_err = self.target.returncode, err
        self.tracer_rc, self.tracer_err = self.tracer.returncode, self.attached_line + terr
        return self


def host_pid_of(popen_pid, inner_pid):
    """The Python process: popen_pid itself, or a descendant whose NSpid ends in inner_pid."""
    def status_nspid(pid):
        try:
            with open(f"/proc/{pid}/status") as handle:
                for line in handle:
                    if line.startswith("NSpid:"):
                        return [int(x) for x in line.split()[1:]]
        except OSError:
            return []
        return []

    todo = [popen_pid]
    while todo:
        pid = todo.pop()
        ns = status_nspid(pid)
        if ns and ns[-1] == inner_pid and (pid == inner_pid or len(ns) > 1):
            return pid
        if pid == inner_pid:
            return pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                todo += [int(x) for x in handle.read().split()]
        except OSError:
            pass
    return popen_pid


@contextmanager
def shared_folder(prefix, mode):
    """A fresh folder with this mode (the tests' own are root's, 0700: another user's
    process cannot reach them), removed afterwards."""
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, mode)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def wait_for_line(stream, text, timeout):
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"never saw {text!r}; got {seen!r}")


def comparable(event, kwargs=True):
    keys = [k for k in COMPARED if k != "kwargs" or kwargs]
    return {k: event[k] for k in keys if k in event}


def module_events(events):
    """The events a reference's trace has too: not the header, nor evmbpf's closing line
    that says what this machine could not observe."""
    return [e for e in events if e.get("event") not in ("header",) + MARKS]


def compare_traces(ref, got, kwargs=True, phase=True):
    """Assert the same events in the same order with the same compared keys."""
    ref_events = module_events(ref)
    got_events = [e for e in module_events(got)
                  if not (e.get("event") == "dropped" and "where" in e)]
    for index, (a, b) in enumerate(zip(ref_events, got_events)):
        ca, cb = comparable(a, kwargs), comparable(b, kwargs)
        if not phase:
            ca.pop("phase", None)
            cb.pop("phase", None)
        if a.get("event") == "error":
            for key in ("exc_type", "message", "phase" if phase else "event", "module",
                        "forward"):
                assert a.get(key) == b.get(key), f"error event differs in {key}: {a} vs {b}"
            assert b["traceback"][-1] == a["traceback"][-1]
            continue
        assert ca == cb, f"event {index} differs:\nreference {a}\nevmbpf    {b}"
    assert len(ref_events) == len(got_events), (
        f"{len(ref_events)} events in the reference, {len(got_events)} from evmbpf")


@functools.lru_cache(maxsize=None)
def torch_major(python=HOST_PYTHON, prefix=()):
    """The torch major version of that Python (0: none), asked once a session."""
    out = subprocess.run([*prefix, python, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True).stdout.strip()
    return int(out.split(".")[0]) if out else 0


def host_kwargs():
    """Are kwargs compared with the reference's on the host? torch 1.x's forward
    pre-hooks do not see them: the reference records {} (run_workload.py)."""
    return torch_major() >= 2


def probes_left(pid=None):
    """uprobes still registered by anyone (perf-based uprobes show in this list while
    their file descriptors are open)."""
    try:
        with open("/sys/kernel/tracing/uprobe_events") as handle:
            text = handle.read()
    except OSError:
        text = ""
    return text


# ---------------------------------------------------------------- version matrix
# Targets other than the host's Python: Debian chroots (scripts/chroot.sh) and pyenv
# Pythons with the stand-in torch. A target says how to start its Python and how the
# files the tests hand it are named inside it.

CHROOT_SH = os.path.join(ROOT, "scripts", "chroot.sh")
PYENV = os.path.expanduser(os.environ.get("PYENV_ROOT", "~/.pyenv"))
STANDIN = os.path.join(ROOT, "tests", "standin")
STANDIN_WORKLOAD = os.path.join(OWN_WORKLOADS, "standin_values.py")


class MatrixTarget:
    """How to run a workload in one cell of the matrix.

    prefix + [python, ...] starts the target's Python; guest(path) names a host path
    the way the target sees it; bind is a host directory the target can write traces
    to, under the same guest(...) name."""

    def __init__(self, name, python, prefix=(), env=None, kwargs=True, chroot=None):
        self.name, self.python, self.prefix = name, python, list(prefix)
        self.env, self.kwargs, self.chroot = env, kwargs, chroot
        self.outdir = None

    def guest(self, path):
        if not self.chroot:
            return path
        path = os.path.realpath(path)
        for host, inside in ((os.path.realpath(ROOT), "/evmbpf/main"),
                             (os.path.realpath(SHARED), "/evmbpf/shared"),
                             (self.outdir, "/evmbpf/out")):
            if host and (path == host or path.startswith(host + "/")):
                return inside + path[len(host):]
        raise ValueError(f"{path} is not visible inside the {self.chroot} chroot")

    def with_outdir(self, outdir):
        """Make outdir writable from inside the target (a chroot gets it bind-mounted)."""
        self.outdir = os.path.realpath(outdir)
        if self.chroot:
            env = dict(self.env or os.environ)
            env["EVMBPF_CHROOT_BIND"] = f"{self.outdir}:/evmbpf/out"
            self.env = env
        return self

    def cmd(self, workload, *extra):
        return [*self.prefix, self.python, self.guest(RUN_WORKLOAD), self.guest(workload),
                *extra]

    def reference(self, workload, out, extra=()):
        return subprocess.run(self.cmd(workload, "--trace", self.guest(out), *extra),
                              capture_output=True, text=True, env=self.env, timeout=600)

    def plain(self, workload, extra=()):
        return subprocess.run(self.cmd(workload, *extra), capture_output=True, text=True,
                              env=self.env, timeout=600)

    def launch(self, workload, out, extra=(), evmbpf_args=(), wrapper=()):
        cmd = [EVMBPF, "--out", out, *evmbpf_args, "--", *wrapper,
               *self.cmd(workload, *extra)]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=600)

    def attached(self, workload, out, extra=(), evmbpf_args=()):
        return AttachedCmd(self.cmd(workload, "--wait-for", self.guest(os.path.join(
            self.outdir, "go")), *extra), os.path.join(self.outdir, "go"), out,
            evmbpf_args=evmbpf_args, env=self.env)


class AttachedCmd(Attached):
    """Attached, for a command line of one's own (a chroot's, a pyenv Python's): the
    target waits for `go` (a host path) before its run()."""

    def __init__(self, cmd, go, out, evmbpf_args=(), env=None):  # pylint: disable=super-init-not-called
        self.dir = os.path.dirname(go)
        self.go = go
        if os.path.exists(go):
            os.unlink(go)
        self._start(cmd, out, evmbpf_args, env)


def host_shared_target(outdir):
    """The host's CPython 3.11 and torch 1.13 run by an embedder of Debian's shared
    libpython3.11 (tests/embed/pyshared.c, built into outdir with python3.11-config from
    libpython3.11-dev): the interpreter lives in libpython3.11.so.1.0. None: no
    python3.11-config here."""
    config = "/usr/bin/python3.11-config"
    if not os.access(config, os.X_OK):
        return None
    flags = subprocess.run([config, "--cflags", "--ldflags", "--embed"], check=True,
                           capture_output=True, text=True).stdout.split()
    exe = os.path.join(str(outdir), "pyshared")
    subprocess.run(["gcc", "-o", exe, os.path.join(ROOT, "tests", "embed", "pyshared.c"),
                    *flags], check=True, capture_output=True, text=True)
    return MatrixTarget("host-shared", exe, kwargs=torch_major() >= 2)


def chroot_target(name):
    """A Debian chroot's python3 (built by scripts/chroot.sh when missing)."""
    kwargs = name != "bullseye"  # torch 1.7: the reference sees no kwargs
    return MatrixTarget(name, "python3", prefix=[CHROOT_SH, "run", name], kwargs=kwargs,
                        chroot=name)


def chroot_ensure(name):
    """Build the chroot unless a complete one is cached; the error text, or None."""
    r = subprocess.run([CHROOT_SH, "ensure", name], capture_output=True, text=True,
                       timeout=3600)
    return None if r.returncode == 0 else (r.stderr or r.stdout)[-2000:]


def chroot_dir(name):
    return subprocess.run([CHROOT_SH, "path", name], capture_output=True, text=True,
                          check=True).stdout.strip()


def chroot_reference(chroot, tmp_path, workload, extra=()):
    """A chroot's target and the reference's trace of workload in it (reference.jsonl in
    tmp_path): (target, path, events). Skips the test when the chroot is not built."""
    import pytest
    if not chroot_dir(chroot):
        pytest.skip(f"the {chroot} chroot is not built (scripts/chroot.sh ensure {chroot})")
    target = chroot_target(chroot).with_outdir(tmp_path)
    ref = str(tmp_path / "reference.jsonl")
    r = target.reference(workload, ref, extra=extra)
    assert r.returncode == 0, r.stderr
    return target, ref, load(ref)


def pyenv_python(version):
    """~/.pyenv/versions/X.Y.*/bin/pythonX.Y, or None."""
    import glob
    hits = sorted(glob.glob(os.path.join(PYENV, "versions", version + ".*", "bin",
                                         "python" + version)))
    return hits[-1] if hits else None


def pyenv_target(version):
    python = pyenv_python(version)
    if not python:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = STANDIN
    env.pop("PYTHONHOME", None)
    return MatrixTarget("pyenv" + version, python, env=env, kwargs=True)


def host_target(outdir=None):
    """The host's Python (writing into outdir, when one is given)."""
    target = MatrixTarget("host", HOST_PYTHON, kwargs=torch_major() >= 2)
    return target.with_outdir(outdir) if outdir else target


def cell_target(where, outdir=None):
    """A cell of the version matrix: host, host-shared (an embedder of the shared
    libpython3.11, built in outdir), a chroot's name, or pyenvX.Y (the stand-in torch)."""
    import pytest
    if where == "host":
        return host_target()
    if where == "host-shared":
        target = host_shared_target(outdir)
        if target is None:
            pytest.skip("no python3.11-config (libpython3.11-dev)")
        return target
    if where.startswith("pyenv"):
        target = pyenv_target(where[len("pyenv"):])
        if target is None:
            pytest.skip(f"pyenv has no CPython {where[len('pyenv'):]}")
        return target
    error = chroot_ensure(where)
    if error:
        pytest.fail(f"cannot build the {where} chroot: {error}")
    return chroot_target(where)


def code_bytes(pid, exe, offsets):
    """The bytes of the process's memory at these file offsets of its executable, by
    offset (0xCC where a uprobe is placed: the kernel writes its breakpoint into the
    process's page). An offset not mapped in the process is an AssertionError."""
    real = os.path.realpath(exe)
    maps = []
    with open(f"/proc/{pid}/maps") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) >= 6 and os.path.realpath(parts[5]) == real:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                maps.append((start, end, int(parts[2], 16)))
    found = {}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for offset in offsets:
            for start, end, base in maps:
                if base <= offset < base + (end - start):
                    mem.seek(start + offset - base)
                    found[offset] = mem.read(1)[0]
                    break
            else:
                raise AssertionError(f"{offset:#x} of {exe} is not mapped in {pid}")
    return found


def slot_tp_call_place(text):
    """(the interpreter's path, slot_tp_call's file offset) from evmbpf -v's lines."""
    m = re.search(r"interpreter (\S+), slot_tp_call at \S+ .*file offset (0x[0-9a-f]+)", text)
    assert m, text
    return m.group(1), int(m.group(2), 16)


def code_byte(pid, exe, offset):
    """code_bytes at one offset."""
    return code_bytes(pid, exe, [offset])[offset]


# how evmbpf makes its probes: uprobe_multi links (Linux 6.6+), or perf event uprobes, as
# on the kernels before (EVMBPF_NO_UPROBE_MULTI=1 makes this kernel's evmbpf use them)
LINKS = ["multi", "perf"]


def use_links(monkeypatch, kind):
    """The evmbpf a test starts from now on makes its probes of this kind (LINKS)."""
    if kind == "perf":
        monkeypatch.setenv("EVMBPF_NO_UPROBE_MULTI", "1")
    else:
        monkeypatch.delenv("EVMBPF_NO_UPROBE_MULTI", raising=False)


def fdinfos(pid):
    """(fd, its /proc fdinfo text) for each descriptor a process holds; none if it is
    gone, and a descriptor closed meanwhile is left out."""
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as handle:
                yield int(fd), handle.read()
        except OSError:
            continue


def multi_links(pid):
    """The uprobe_multi links a process holds, from its descriptors' fdinfo (evmbpf makes
    each probe one where the kernel has them: session/uprobes.c), as bpftool perf list
    shows a perf uprobe: pid (the holder), fd, prog_id, fd_type (uprobe, uretprobe),
    filename (the probed file as the kernel names it), offset; and target (the pid the
    link is for)."""
    found = []
    for fd, text in fdinfos(pid):
        kind = re.search(r"^link_type:\s+(u(?:ret)?probe)_multi$", text, re.M)
        if not kind:
            continue
        field = lambda name: (re.search(rf"^{name}:\s+(\S+)", text, re.M) or [None, ""])[1]
        offs = re.findall(r"^\d+\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+$", text, re.M)
        found.append({"pid": pid, "fd": int(fd), "prog_id": int(field("prog_id") or 0),
                      "fd_type": kind.group(1), "filename": field("path"),
                      "offset": int(offs[0], 16) if offs else None,
                      "target": int(field("pid") or 0)})
    return found


def link_types(pid):
    """The type of each BPF link a process holds (its descriptors' fdinfo: "perf" for a
    perf event's, "uprobe_multi", "raw_tracepoint", ...)."""
    kinds = (re.search(r"^link_type:\s+(\S+)$", text, re.M) for _, text in fdinfos(pid))
    return [kind.group(1) for kind in kinds if kind]


def perf_links(pid):
    """The probes a process holds: the perf event links (uprobes, breakpoints, raw
    tracepoints) bpftool lists for it, and its uprobe_multi links (multi_links)."""
    out = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True)
    return [p for p in json.loads(out.stdout or "[]") if p.get("pid") == pid] + multi_links(pid)


def links_on(targets, holder=None):
    """Every probe on the node that is on one of the target pids, or held by holder: perf
    uprobes whose file is named through /proc/TARGET/, uprobe_multi links for a target
    (any process's)."""
    out = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True)
    left = [p for p in json.loads(out.stdout or "[]") if p.get("pid") == holder
            or any(f"/proc/{t}/" in p.get("filename", "") for t in targets)]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            left += [m for m in multi_links(int(entry))
                     if m["target"] in targets or m["pid"] == holder]
    return left


def own_rss(cmd):
    """cmd run by a small shell that forks it, rather than straight from pytest: Linux
    gives a process the resident size of the one it was forked from as its peak
    (ru_maxrss survives fork and exec), so a fuzzer's -rss_limit_mb, which reads it,
    stopped at once with an empty 'oom-' input when the test session held over 2 GB."""
    return ["/bin/sh", "-c", '"$@"; exit $?', "sh", *cmd]


def peak_rss_kb(args, check=True):
    """The peak RSS of a command (its children's ru_maxrss, in kB); check: it must
    succeed."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[2:], "
             "stdout=subprocess.DEVNULL, check=sys.argv[1] == '1'); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    return int(subprocess.run([sys.executable, "-c", probe, "1" if check else "0", *args],
                              capture_output=True, text=True, check=True).stdout)


# ---- targets paused inside a forward, and the cells of the matrix by kind (dump, doctor,
# frames, record)

MIDFORWARD = os.path.join(OWN_WORKLOADS, "midforward.py")


def target_of(kind, name, outdir):
    """The matrix's target of a kind ("pyenv" with a version, "chroot" with a name),
    writing into outdir; skipped without that pyenv CPython, failed when the chroot
    cannot be built."""
    import pytest
    if kind == "pyenv":
        target = pyenv_target(name)
        if not target:
            pytest.skip(f"no pyenv CPython {name}")
    else:
        error = chroot_ensure(name)
        if error:
            pytest.fail(f"cannot build the {name} chroot: {error}")
        target = chroot_target(name)
    return target.with_outdir(outdir)


def python_under(root_pid, needle):
    """The pid of the process under root_pid (itself included) running `needle`."""
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{pid}/comm") as handle:
                comm = handle.read().strip()
            if comm.startswith("python") and any(needle.encode() in a for a in argv):
                return pid
            with open(f"/proc/{pid}/task/{pid}/children") as handle:
                todo += [int(x) for x in handle.read().split()]
        except OSError:
            continue
    return None


@contextmanager
def paused(target, workload, tmp_path, extra=()):
    """The workload's Python, paused inside a forward until the block ends."""
    flag, resume = tmp_path / "paused", tmp_path / "resume"
    env = dict(target.env or os.environ, MIDFORWARD_FLAG=target.guest(str(flag)),
               MIDFORWARD_RESUME=target.guest(str(resume)), MIDFORWARD_PAUSE="60")
    proc = subprocess.Popen(target.cmd(workload, *extra), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the workload never paused"
            time.sleep(0.02)
        pid = python_under(proc.pid, os.path.basename(workload))
        assert pid, "no Python process running the workload"
        yield pid
        resume.touch()
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    finally:
        resume.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
