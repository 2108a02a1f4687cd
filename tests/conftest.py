import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from evmbpf_testlib import EVMBPF, debug_registers  # noqa: E402


def pytest_collection_modifyitems(config, items):
    needs_root = pytest.mark.skip(reason="needs root: the tracer loads BPF programs")
    for item in items:
        if "root" in item.keywords and os.geteuid() != 0:
            item.add_marker(needs_root)


def pytest_configure(config):
    config.addinivalue_line("markers", "root: loads BPF programs, needs root")
    config.addinivalue_line("markers", "slow: long-running; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "debug_registers: its subject needs hardware "
                            "breakpoints that fire (evmbpf doctor's self-test)")


def pytest_runtest_setup(item):
    """A test whose subject needs debug registers runs where they fire, and says why not
    elsewhere: the same self-test evmbpf runs (`evmbpf doctor`'s line)."""
    if "debug_registers" in item.keywords and os.geteuid() == 0:
        fire, why = debug_registers()
        if not fire:
            pytest.skip(f"hardware breakpoints do not fire on this machine ({why})")


@pytest.fixture(scope="session")
def evmbpf():
    if not os.access(EVMBPF, os.X_OK):
        pytest.fail(f"{EVMBPF} is not built: run make")
    return EVMBPF


# the fault tests' (tests/test_faults_*.py): one fork server of processes that imported
# torch, and the full trace of the same forwards, for every file of them
@pytest.fixture(scope="session")
def server():
    from faults_lib import ForkServer
    s = ForkServer()
    yield s
    s.close()


@pytest.fixture(scope="session")
def full_trace(server, tmp_path_factory):
    """The same forwards, traced to their end without a kill: the oracle for the prefixes."""
    from faults_lib import (FULL_FORWARDS, MODULES_PER_FORWARD, ROWS, Tracer,
                            read_jsonl)
    out = str(tmp_path_factory.mktemp("full") / "full.jsonl")
    pid, go, done = server.fork(FULL_FORWARDS, ROWS)
    tracer = Tracer(pid, out)
    open(go, "w").close()
    assert server.reap(pid) == 0
    assert tracer.wait() == 0, tracer.err
    events, _ = read_jsonl(out)
    forwards = [e for e in events if e["event"] == "forward"]
    assert len(forwards) == FULL_FORWARDS
    enters = [e for e in events if e["event"] == "enter"]
    assert len(enters) == FULL_FORWARDS * MODULES_PER_FORWARD
    with open(done) as handle:
        checksum = handle.read()
    return events, checksum


@pytest.fixture(scope="session", autouse=True)
def stress():
    """EVMBPF_STRESS=1 (make test-stress): twice as many busy loops as CPUs run beside
    every test, so that the traces are compared with the reference's on a starved
    machine (holds, attach windows and bound-call sites under load)."""
    import subprocess
    if os.environ.get("EVMBPF_STRESS") != "1":
        yield
        return
    loops = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"])
             for _ in range(2 * (os.cpu_count() or 1))]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()
