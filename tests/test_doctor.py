"""evmbpf doctor: one line per check, ✓ / ✗ / ·, exit 0 only when a trace would work —
checked against what a trace of the same process then does."""
import os
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (AGENT, EVMBPF, FULL_MATRIX, HOST_PYTHON, MIDFORWARD, debug_registers,
                            host_target, load, paused)

pytestmark = pytest.mark.root


def doctor(*args, prefix=()):
    return subprocess.run([*prefix, EVMBPF, "doctor", *args], capture_output=True, text=True,
                          timeout=60)


def checks(stdout):
    """{name: (mark, text)} of the check lines: the name is what comes before ':'."""
    out = {}
    for line in stdout.splitlines():
        mark, text = line.split(" ", 1)
        assert mark in ("✓", "✗", "·"), line
        out[text.split(":", 1)[0]] = (mark, text)
    return out


def machine_ok(r):
    """The exit status and the failed checks but the one a machine without working
    debug registers has (its own tests: test_machines.py): what a test of something
    else expects."""
    c = checks(r.stdout)
    fire = debug_registers()[0]
    assert (c["hardware breakpoints"][0] == "✓") == fire, c["hardware breakpoints"]
    failed = [t for m, t in c.values() if m == "✗" and not t.startswith("hardware breakpoints")]
    return r.returncode - (0 if fire or failed else 1), failed


def test_doctor_host_target_then_a_trace_works(evmbpf, tmp_path):
    """On the host's Python paused in a forward: every check passes, the tensor layout
    validates on one of the model's parameters, and a trace attached next works."""
    target = host_target(tmp_path)
    with paused(target, MIDFORWARD, tmp_path, ("--phase", "evaluation")) as pid:
        r = doctor("--pid", str(pid))
        out = str(tmp_path / "t.jsonl")
        tracer = subprocess.Popen([EVMBPF, "--pid", str(pid), "--out", out],
                                  stderr=subprocess.PIPE, text=True)
        line = tracer.stderr.readline()
        assert line.startswith("attached to"), line
        (tmp_path / "resume").touch()
    assert tracer.wait(timeout=60) == 0
    assert [e["module"] for e in load(out) if e["event"] == "enter"][:3] == [
        "layers.2", "layers.3", "head"]
    rc, failed = machine_ok(r)
    assert rc == 0 and not failed, r.stdout + r.stderr
    c = checks(r.stdout)
    for name in ("kernel", "BTF", "uprobes", "privileges", "BPF", "slot_tp_call", "hold"):
        assert c[name][0] == "✓", c[name]
    assert c["Python 3.11.2, a release build with the GIL, linked into /usr/bin/python3.11"]
    assert any(k.startswith("torch 1.13") and v[0] == "✓" for k, v in c.items())
    mark, text = c["tensor layout"]
    assert mark == "✓" and "validates on a parameter of the running model" in text, text
    assert '"dtype": "float32", "device": "cpu"}' in text
    assert c["phase markers"] == ("✓", "phase markers: followed (evalmetry's phase(); "
                                       "evalmetry.debug is imported)")
    assert c["CUDA"][0] == "·"


def test_doctor_machine_only(evmbpf):
    r = doctor()
    rc, failed = machine_ok(r)
    assert rc == 0 and not failed, r.stdout + r.stderr
    assert set(checks(r.stdout)) >= {"kernel", "BTF", "uprobes", "privileges", "BPF"}


def test_doctor_not_python_and_no_process(evmbpf):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r = doctor("--pid", str(sleeper.pid))
    finally:
        sleeper.kill()
    assert r.returncode == 1
    _, bad = machine_ok(r)
    assert len(bad) == 1 and "is not a Python interpreter" in bad[0], r.stdout
    assert r.stderr.strip() == ("evmbpf: 1 check failed: a trace would not work (see the ✗ line)"
                                if debug_registers()[0] else
                                "evmbpf: 2 checks failed: a trace would not work (see the ✗ "
                                "lines)")
    r = doctor("--pid", "4194000")
    assert r.returncode == 1
    _, bad = machine_ok(r)
    assert bad == ["process 4194000: there is no such process; check the pid (as the host "
                   "sees it: `ps -e`)"]
    r = doctor("--pid", "nope")
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1


def test_doctor_without_capabilities(evmbpf):
    """As nobody without capabilities: the privilege line says which are missing, the
    BPF checks cannot be made, the exit status is 1 — as the tracer refuses then."""
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
              "--inh-caps=-all", "--ambient-caps=-all"]
    r = doctor(prefix=prefix)
    assert r.returncode == 1, r.stdout
    c = checks(r.stdout)
    mark, text = c["privileges"]
    assert mark == "✗" and "missing CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, " \
        "CAP_KILL" in text and "sudo" in text, text
    assert c["BPF"][0] == "✗"
    tracer = subprocess.run([*prefix, EVMBPF, "--pid", str(os.getpid()), "--out", "/dev/null"],
                            capture_output=True, text=True)
    assert tracer.returncode != 0 and "CAP_BPF" in tracer.stderr


# the set the README documents; the other (the tracer attaches: slow) with EVMBPF_FULL_MATRIX=1
CAP_SETS = [["bpf", "perfmon", "sys_ptrace"]] + (
    [["sys_admin", "sys_ptrace"]] if FULL_MATRIX else [])


@pytest.mark.parametrize("caps", CAP_SETS, ids=["+".join(c) for c in CAP_SETS])
def test_doctor_agrees_with_the_tracer(evmbpf, caps):
    """As nobody with a capability set that may be enough: doctor's verdict (exit status,
    its uprobe events line) is what the tracer then does on a process of nobody's —
    CAP_BPF + CAP_PERFMON are documented as enough, and some kernels still refuse
    uprobes without CAP_SYS_ADMIN."""
    spec = ",".join("+" + c for c in caps)
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
              f"--inh-caps={spec}", f"--ambient-caps={spec}"]
    r = doctor(prefix=prefix)
    c = checks(r.stdout)
    assert c["privileges"][0] == "✓", r.stdout
    target = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               HOST_PYTHON, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        tracer = subprocess.Popen([*prefix, EVMBPF, "--pid", str(target.pid), "--out", "-"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = tracer.stderr.readline()
        if first.startswith("attached to") and not debug_registers()[0]:
            tracer.stderr.readline()  # where breakpoints do not fire, a line says so
        if tracer.poll() is None or first.startswith("attached to"):
            tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
    finally:
        target.kill()
        target.wait()
    if machine_ok(r)[0] == 0:
        assert c["uprobe events"][0] == "✓"
        assert first.startswith("attached to"), first
    else:
        assert c["uprobe events"][0] == "✗", r.stdout
        assert "allows uprobes only with CAP_SYS_ADMIN" in c["uprobe events"][1]
        assert "allows uprobes only with CAP_SYS_ADMIN" in first, first


def _agent_glibc():
    """the newest GLIBC_ version the agent's ELF needs, as readelf -V lists it"""
    out = subprocess.run(["readelf", "-V", AGENT], capture_output=True, text=True,
                         check=True).stdout
    import re
    versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", out)}
    return ".".join(map(str, max(versions)))


def _agent_line(pid):
    r = doctor("--pid", str(pid))
    return checks(r.stdout)["CUPTI agent"]


def _sleeper(prefix=(), env=None):
    p = subprocess.Popen([*prefix, "python3" if prefix else HOST_PYTHON, "-c",
                          "import os, time; print(os.getpid(), flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True, env=env)
    return p, int(p.stdout.readline())


@pytest.mark.skipif(not os.path.exists(AGENT), reason="no CUPTI headers: the agent was not built")
def test_doctor_says_what_the_cupti_agent_needs_of_the_target(evmbpf, tmp_path):
    """The agent's glibc need (its ELF's version needs) against the glibc the target has
    mapped, and a libcupti of CUDA 12 or 13: one mapped by the target is named first."""
    import platform
    have = platform.libc_ver()[1]
    need = _agent_glibc()
    # a libcupti of CUDA 12 mapped by the target (a stand-in library of that name)
    src = tmp_path / "cupti.c"
    src.write_text("int fake_cupti_standin;\n")
    lib = tmp_path / "libcupti.so.12"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    p, pid = _sleeper(env=dict(os.environ, LD_PRELOAD=str(lib)))
    try:
        mark, text = _agent_line(pid)
    finally:
        p.kill()
        p.wait()
    assert mark == "✓", text
    assert "%s needs glibc >= %s, the target has %s (" % (AGENT, need, have) in text, text
    assert text.endswith("libcupti %s (mapped)" % lib), text


@pytest.mark.skipif(not os.path.exists(AGENT), reason="no CUPTI headers: the agent was not built")
def test_doctor_finds_a_libcupti_in_the_targets_wheels(evmbpf, tmp_path):
    """A libcupti the target has not mapped, in a site-packages it maps a library from
    (as pip's nvidia-cuda-cupti wheel installs it): the agent would find it there."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    lib_dir = site / "nvidia" / "cuda_cupti" / "lib"
    lib_dir.mkdir(parents=True)
    (site / "torch" / "lib").mkdir(parents=True)
    src = tmp_path / "stub.c"
    src.write_text("int stub_of_a_wheel;\n")
    mapped = site / "torch" / "lib" / "libstub.so"
    for out in (mapped, lib_dir / "libcupti.so.12"):
        subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    p, pid = _sleeper(env=dict(os.environ, LD_PRELOAD=str(mapped)))
    try:
        mark, text = _agent_line(pid)
    finally:
        p.kill()
        p.wait()
    assert mark == "✓", text
    assert text.endswith("libcupti %s (in its wheels)" % (lib_dir / "libcupti.so.12")), text


@pytest.mark.skipif(not os.path.exists(AGENT), reason="no CUPTI headers: the agent was not built")
def test_doctor_says_a_targets_glibc_is_too_old_for_the_agent(evmbpf):
    """bullseye's Python (glibc 2.31) in its chroot: its libc is read as the target maps
    it (through /proc/PID/root), older than the agent needs: a · line saying so."""
    from evmbpf_testlib import CHROOT_SH, chroot_dir
    if not chroot_dir("bullseye"):
        pytest.skip("the bullseye chroot is not built (scripts/chroot.sh ensure bullseye)")
    p, pid = _sleeper(prefix=[CHROOT_SH, "run", "bullseye"])
    try:
        mark, text = _agent_line(pid)
    finally:
        p.kill()
        p.wait()
        subprocess.run(["kill", str(pid)], capture_output=True)
    assert mark == "·", text
    assert "needs glibc >= %s, the target has 2.31 (" % _agent_glibc() in text, text
    assert "too old, the agent would not load" in text and "no libcupti of CUDA 12 or 13" in text
