"""What the attach loads: `evmbpf -v` names each program the verifier checked and its
instruction count, the sum is the attach's verification work, and only the marker probe
that this Python's `with` statement takes is loaded (3.9/3.10: _Py_Identifier, 3.11-3.13:
a str, 3.14: a _PyStackRef). The traces themselves are compared with the reference in
test_trace.py, test_matrix.py and scripts/same-traces.py."""
import os
import re
import subprocess

import pytest

from evmbpf_testlib import EVMBPF, HOST_PYTHON, STANDIN, pyenv_python

pytestmark = pytest.mark.root  # runs the tracer: loads BPF programs

MARKERS = {"marker_enter", "marker_enter_ident", "marker_enter_stackref"}
LIMIT = 1_000_000  # the verifier's limit per program


def verified(python, tmp_path, *extra, env=None):
    out = tmp_path / "t.jsonl"
    r = subprocess.run([EVMBPF, "-v", *extra, "--out", str(out), "--", python, "-c", "pass"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"^evmbpf: instructions verified: (\d+) in all:((?: \w+ \d+)+)$", r.stderr,
                  re.M)
    assert m, r.stderr[-3000:]
    words = m.group(2).split()
    progs = dict(zip(words[::2], map(int, words[1::2])))
    assert sum(progs.values()) == int(m.group(1))
    ce = re.search(r"^evmbpf: call_enter: (\d+) instructions verified$", r.stderr, re.M)
    assert ce and int(ce.group(1)) == progs["call_enter"]
    return progs


def check(progs, marker):
    assert {"call_enter", "call_exit", "bound_trap", "task_exit", "task_exec"} <= set(progs)
    assert set(progs) & MARKERS == {marker}
    assert all(0 < n < LIMIT for n in progs.values()), progs


@pytest.mark.parametrize("numeric", [False, True])
def test_host_programs(numeric, tmp_path):
    check(verified(HOST_PYTHON, tmp_path, *(["--numeric"] if numeric else [])), "marker_enter")


@pytest.mark.parametrize("version,marker", [("3.9", "marker_enter_ident"),
                                            ("3.10", "marker_enter_ident"),
                                            ("3.12", "marker_enter"),
                                            ("3.13", "marker_enter")])
def test_pyenv_programs(version, marker, tmp_path):
    python = pyenv_python(version)
    if not python:
        pytest.skip(f"no pyenv CPython {version}")
    env = dict(os.environ, PYTHONPATH=STANDIN)
    env.pop("PYTHONHOME", None)
    check(verified(python, tmp_path, env=env), marker)
