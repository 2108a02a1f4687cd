"""evmbpf stops or dies (SIGINT, SIGTERM, SIGHUP, SIGKILL), or cannot write (a full disk,
a file size limit): every probe is gone, the target runs on untouched, and what was
written is a valid trace. Figures are printed
(`pytest -s`). Shared helpers: faults_lib.py; the fork server and the full trace the
killed ones are compared with: conftest.py."""
import os
import resource
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, LINKS, RUN_WORKLOAD, use_links)
from faults_lib import (FAULT_MODEL, FULL_FORWARDS, ROWS, key, open_stack, probe_bytes,
                        read_jsonl, Tracer)

pytestmark = pytest.mark.root


# ---------------------------------------------------------------- evmbpf stops or dies

@pytest.mark.parametrize("links", LINKS)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"])
def test_evmbpf_stopped(server, full_trace, sig, links, tmp_path, monkeypatch):
    """evmbpf is stopped (or killed) mid-run: the target runs on to its normal end with the
    same result, every probe is gone, the file is complete (SIGKILL: valid up to its last
    complete line, and the reader reads it). With uprobe_multi links, and with the perf
    event uprobes of kernels before 6.6 (EVMBPF_NO_UPROBE_MULTI=1)."""
    use_links(monkeypatch, links)
    full, checksum = full_trace
    out = str(tmp_path / "t.jsonl")
    pid, go, done = server.fork(FULL_FORWARDS, ROWS)
    tracer = Tracer(pid, out)
    open(go, "w").close()
    time.sleep(0.5)
    assert probe_bytes(pid, tracer.address) == 0xCC, "no breakpoint seen while attached"
    killed_at = time.time_ns()
    tracer.proc.send_signal(sig)
    rc = tracer.wait()
    # the target: still running, or done; either way it ends normally with the same result
    assert server.reap(pid) == 0
    with open(done) as handle:
        assert handle.read() == checksum
    tracer.assert_probes_gone()
    events, tail = read_jsonl(out, partial_ok=sig == signal.SIGKILL)
    body = [e for e in events[1:] if e["event"] in ("forward", "enter", "exit")]
    # the prefix of the full run; then, the entry probe gone first, only the returns of
    # calls seen entering (paired by open_stack below)
    same = 0
    while same < len(body) and key(full[1 + same]) == key(body[same]):
        same += 1
    assert all(e["event"] == "exit" for e in body[same:]), body[same:same + 3]
    open_stack(events[1:])
    last_ts = max(e["ts_ns"] for e in body)
    lag = (killed_at - last_ts) / 1e6
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
        r = subprocess.run([EVMBPF, "summarize", out], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        # a kill mid-write leaves a partial last line: the readers skip it, say so, and
        # read the rest (made here by cutting the file inside its last line)
        with open(out, "rb") as handle:
            data = handle.read()
        whole = data[:data.rstrip(b"\n").rfind(b"\n") + 1]
        cut, trimmed = str(tmp_path / "cut.jsonl"), str(tmp_path / "trimmed.jsonl")
        with open(cut, "wb") as handle:
            handle.write(data[:len(whole) + 40])
        with open(trimmed, "wb") as handle:
            handle.write(whole)
        a = subprocess.run([EVMBPF, "summarize", cut], capture_output=True, text=True)
        b = subprocess.run([EVMBPF, "summarize", trimmed], capture_output=True, text=True)
        assert a.returncode == 0 and "incomplete" in a.stderr, a.stderr
        assert a.stdout.replace(cut, trimmed) == b.stdout
        assert lag < 500, f"{lag:.0f} ms of events lost before the kill"
    else:
        assert rc == 0, tracer.err
        assert "detached from" in tracer.err
        assert not tail
        unwound = [e for e in events if e["event"] == "unwound"]
        assert all(e["reason"] == "session ended" for e in unwound)
        # the frames still running when evmbpf stopped close the file
        assert events[len(events) - len(unwound):] == unwound
        open_stack(events[1:])  # consistent to the end
    print(f"\n{signal.Signals(sig).name}: {len(body)} events, last one {lag:.0f} ms before "
          f"the signal, partial last line {len(tail)} bytes")


def test_full_disk(server, full_trace, tmp_path):
    """--out on a 256 KiB tmpfs: a clear error, probes removed, target unharmed, rc 1."""
    _, checksum = full_trace
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr}")
    try:
        out = str(mnt / "t.jsonl")
        pid, go, done = server.fork(FULL_FORWARDS, ROWS)
        tracer = Tracer(pid, out)
        open(go, "w").close()
        rc = tracer.wait(timeout=60)
        assert rc == 1, tracer.err
        assert "No space left on device" in tracer.err
        assert "the target runs on" in tracer.err
        assert tracer.err.count("cannot write") == 1, tracer.err  # said once
        tracer.assert_probes_gone()
        assert server.reap(pid) == 0
        with open(done) as handle:
            assert handle.read() == checksum
        # what did get written is whole lines up to a cut
        read_jsonl(out, partial_ok=True)
        # launch mode: the command runs to its end untraced, evmbpf waits for it and fails
        os.unlink(out)
        r = subprocess.run([EVMBPF, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD,
                            FAULT_MODEL], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, FAULT_FORWARDS="3000"))
        assert r.returncode == 1, r.stderr
        assert "No space left on device" in r.stderr and "checksum" in r.stderr, r.stderr
        assert r.stderr.count("cannot write") == 1, r.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_file_size_limit(server, full_trace, tmp_path):
    """A file that cannot be written further (RLIMIT_FSIZE): EFBIG, not death by SIGXFSZ."""
    _, checksum = full_trace
    out = str(tmp_path / "t.jsonl")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    pid, go, done = server.fork(FULL_FORWARDS, ROWS)
    tracer = Tracer(pid, out, preexec_fn=limit)
    open(go, "w").close()
    rc = tracer.wait(timeout=60)
    assert rc == 1, tracer.err
    assert "File too large" in tracer.err
    tracer.assert_probes_gone()
    assert server.reap(pid) == 0
    with open(done) as handle:
        assert handle.read() == checksum
