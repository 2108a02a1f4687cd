"""`evmbpf record`'s retention (docs/record.md, "How much of the disk") and the host in its
names, on real CPython + real PyTorch under the real BPF programs: --max-dir-size, the
recorder's files in DIR (DIR/evmbpf-*.jsonl and DIR/job-*/evmbpf-*.jsonl, root's regular
files; nothing else), the oldest removed first, each said; --keep-free, what DIR's file
system keeps free, a write refused (said) when even every old file removed leaves too
little; the defaults (10% and 15% of the file system, each at most 4G) said at the start;
evmbpf-PID[-rankR]@HOST[.N][.flush-K].jsonl, and `summarize DIR` showing each process's
host, the folders of two nodes merged.

Every recorder here takes only the processes of its own test (--match with a token of
the test's own), raises.py run through a link in a folder named by that token."""
import errno
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, RUN_WORKLOAD,
                            load, recorded_why)
from test_record import Recorder as RecorderOf, clean_env, settled

pytestmark = pytest.mark.root

TAIL = 50
RAISES = os.path.join(REF_WORKLOADS, "raises.py")  # raises in its forward: exit status 1
RECORD_ANY = os.path.join(OWN_WORKLOADS, "record_any.py")  # RECORD_HANG_AT: a hang
HOST = re.sub(r"[^A-Za-z0-9_-]", "_", os.uname().nodename)[:64]
MIB = 1 << 20
DAY = 86400


def Recorder(directory, token, *args, pidfile, env=None):
    """tests/test_record.py's recorder, taking only the processes of this test's token."""
    return RecorderOf(directory, "--match", token, *args, pidfile=pidfile, tail=TAIL, env=env)


def wanted(base, workload=RAISES):
    """A token of this test's own, and the workload (raises.py) linked in a folder of that
    name: a process run from there is the only one the test's --match takes."""
    token = f"evmbpf-retention-{secrets.token_hex(6)}"
    folder = base / token
    folder.mkdir()
    script = folder / os.path.basename(workload)
    os.symlink(workload, script)
    return token, str(script)


def run_raises(rec, script):
    """raises.py, started and run to its end while the recorder runs: its pid."""
    proc = subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    return proc.pid


def files_of(directory):
    found = set()
    for root, dirs, names in os.walk(directory):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            found.add(os.path.relpath(os.path.join(root, name), directory))
    return found


def old_file(path, size, days, owner=None):
    """A file of size bytes whose mtime is `days` ago."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"x" * size)
    if owner is not None:
        os.chown(path, owner, owner)
    when = time.time() - days * DAY
    os.utime(path, (when, when))
    return path


def statvfs_bytes(path):
    vfs = os.statvfs(path)
    return vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize


def default_part(fs, percent):
    """retention.c's default: percent of the file system, at most 4 GiB."""
    return min(fs // 100 * percent + fs % 100 * percent // 100, 4 << 30)


# ---------------------------------------------------------------- --max-dir-size

# the recorder's files (1 MiB each) with their ages in days, oldest first: the three oldest
# go (5 MiB with the new trace past 2.5 MiB; 2 MiB with it under), the others stay
COUNTED = [("job-old/evmbpf-2-rank0@old.jsonl", 12), ("evmbpf-1@old.jsonl", 11),
           ("job-mixed/evmbpf-9@old.jsonl", 10), ("evmbpf-3.jsonl", 3),
           ("evmbpf-4@old.flush-1.jsonl", 2)]
GONE = [name for name, _ in COUNTED[:3]]
# older still, never the recorder's to remove: not its names, another user's, a link (to
# a file and to a folder), a folder not named job-*, a job folder others can write
UNTOUCHED = ["notes.txt", "evmbpf-5@old.json", "other.jsonl", "keep/evmbpf-8@old.jsonl",
             "job-mixed/notes.txt", "evmbpf-10@old.jsonl", "job-open/evmbpf-11@old.jsonl"]


@pytest.fixture(scope="module")
def trimmed(evmbpf, tmp_path_factory):
    """A recorder with --max-dir-size 2.5M over a folder of old files (COUNTED, UNTOUCHED,
    and links), one raises.py run: its stderr, the trace's path, the files left."""
    base = tmp_path_factory.mktemp("retention")
    traces = base / "traces"
    traces.mkdir(mode=0o700)
    for name, days in COUNTED:
        old_file(str(traces / name), MIB, days)
    for name in UNTOUCHED:
        old_file(str(traces / name), MIB, 20, owner=65534 if "evmbpf-10" in name else None)
    os.chmod(traces / "job-open", 0o777)
    old_file(str(base / "outside.jsonl"), MIB, 20)
    os.symlink(base / "outside.jsonl", traces / "evmbpf-6@old.jsonl")
    old_file(str(base / "elsewhere" / "evmbpf-7@old.jsonl"), MIB, 20)
    os.symlink(base / "elsewhere", traces / "job-link")
    for link in ("evmbpf-6@old.jsonl", "job-link"):
        when = time.time() - 30 * DAY
        os.utime(traces / link, (when, when), follow_symlinks=False)
    token, script = wanted(base)
    rec = Recorder(traces, token, "--max-dir-size", "2560K", "--keep-free", "0",
                   pidfile=base / "pid")
    try:
        pid = run_raises(rec, script)
        path = str(traces / f"evmbpf-{pid}@{HOST}.jsonl")
        rec.wait_for(rf"^{pid}: trace in ")
        settled(path)
    finally:
        assert rec.stop() == 0, rec.stderr()
    return {"stderr": rec.stderr(), "path": path, "pid": pid, "dir": str(traces),
            "base": base, "files": files_of(str(traces))}


def test_the_oldest_go_first_and_are_said(trimmed):
    """The three oldest of the recorder's files go, oldest first, each said in one line
    (the file, its size, its age, the limit); the newer two stay, and so does the trace."""
    d, err = trimmed["dir"], trimmed["stderr"]
    removed = re.findall(r"^retention: removed (\S+) \((\d+) bytes, ([\d.]+) days old\), the "
                         r"oldest of the recorder's files, for (\d+)'s trace \(\d+ bytes\): "
                         r"--max-dir-size 2621440 ", err, re.M)
    assert removed == [(os.path.join(d, name), str(MIB), f"{days:.1f}", str(trimmed["pid"]))
                       for name, days in COUNTED[:3]], err
    for name in GONE:
        assert name not in trimmed["files"], (name, trimmed["files"])
    for name, _ in COUNTED[3:]:
        assert name in trimmed["files"], (name, trimmed["files"])
    assert "is not written" not in err, err


def test_the_new_trace_is_written(trimmed):
    events = settled(trimmed["path"])
    assert events and events[-1]["event"] in ("unwound", "dropped", "error"), events[-1:]
    assert recorded_why(trimmed["path"]) == "exit status 1"


def test_nothing_else_is_touched(trimmed):
    """Not the recorder's names, another user's file, links and what they point at, a
    folder not named job-*, a job folder others can write: all there, as they were."""
    d, files = trimmed["dir"], trimmed["files"]
    for name in UNTOUCHED:
        assert name in files, (name, files)
        assert os.path.getsize(os.path.join(d, name)) == MIB
    assert os.path.islink(os.path.join(d, "evmbpf-6@old.jsonl"))
    assert os.path.islink(os.path.join(d, "job-link"))
    assert os.path.getsize(trimmed["base"] / "outside.jsonl") == MIB
    assert os.path.getsize(trimmed["base"] / "elsewhere" / "evmbpf-7@old.jsonl") == MIB


def test_an_emptied_job_folder_goes(trimmed):
    """job-old/ held one old trace, removed: the folder goes; job-mixed/ keeps its other
    file, and stays."""
    assert not os.path.exists(os.path.join(trimmed["dir"], "job-old"))
    assert os.path.isdir(os.path.join(trimmed["dir"], "job-mixed"))


def test_the_host_in_the_name_and_in_summarize(trimmed, tmp_path):
    """The trace is evmbpf-PID@HOST.jsonl (uname's nodename, made safe); summarize DIR shows
    the host the recorder's mark names. Merged with another node's folder (the same pid,
    its own name): both listed, by the time of their ends, each with its host."""
    pid, path = trimmed["pid"], trimmed["path"]
    assert os.path.basename(path) == f"evmbpf-{pid}@{HOST}.jsonl"
    mark = load(path, marks=True)[-1]
    host = mark["process"]["host"]
    assert host == socket.gethostname(), mark
    # two nodes' folders merged into one: this node's trace, and another's of the same pid
    # whose end came 1 s before this one's and another 1 s after
    merged = tmp_path / "merged"
    merged.mkdir()
    shutil.copy(path, merged)
    end = max(e["ts_ns"] for e in load(path) if "ts_ns" in e)
    for name, ts in ((f"evmbpf-{pid}@other-node.jsonl", end - 10**9),
                     (f"evmbpf-{pid}@third-node.jsonl", end + 10**9)):
        other = [{"event": "forward", "forward": 1, "phase": "model_forward", "samples": None,
                  "batch_rows": None, "ts_ns": ts - 1000, "i": 1},
                 {"event": "error", "exc_type": "KeyError", "message": name, "forward": 1,
                  "phase": "model_forward", "module": "<root>", "traceback": [], "tid": pid,
                  "ts_ns": ts, "i": 2}]
        with open(merged / name, "w") as handle:
            handle.writelines(json.dumps(e) + "\n" for e in other)
    out = subprocess.run([EVMBPF, "summarize", str(merged)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    listed = re.findall(r"^  \d\. \S+ \S+ UTC  pid (\d+), rank -, host (\S+)  ", out.stdout,
                        re.M)
    assert listed == [(str(pid), "other-node"), (str(pid), host), (str(pid), "third-node")], \
        out.stdout
    assert f"\n=== 2 of 3: pid {pid}, rank -, host {host} ===\n" in out.stdout, out.stdout
    assert f"\nhost:   {host}\n" in out.stdout
    assert "\nhost:   other-node\n" in out.stdout


def test_the_entries_read_are_bounded(evmbpf, tmp_path):
    """At most so many entries of DIR are read a scan (EVMBPF_TEST_RETENTION_ENTRIES=8 for
    the test, 100000 else), said once: of 12 old files of 1 MiB, the 8 read count, 4 of
    them go under --max-dir-size 4.5M (whichever 8 the folder gives first), the 4 others
    are not looked at."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o700)
    for k in range(12):
        old_file(str(traces / f"evmbpf-{k + 1}@old.jsonl"), MIB, 20 - k)
    token, script = wanted(tmp_path)
    rec = Recorder(traces, token, "--max-dir-size", "4608K", "--keep-free", "0",
                   pidfile=tmp_path / "pid", env={"EVMBPF_TEST_RETENTION_ENTRIES": "8"})
    try:
        pid = run_raises(rec, script)
        rec.wait_for(rf"^{pid}: trace in ")
    finally:
        assert rec.stop() == 0, rec.stderr()
    err = rec.stderr()
    assert err.count("hold more than 8 entries") == 1, err
    assert len(re.findall(r"^retention: removed ", err, re.M)) == 4, err
    assert len(files_of(str(traces))) == 12 - 4 + 1, files_of(str(traces))


# ---------------------------------------------------------------- --keep-free, the defaults

def test_keep_free_refuses_the_write(evmbpf, tmp_path):
    """--keep-free more than the file system has free: even every old file removed would
    not keep it, so none is removed and the trace is not written, said."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o700)
    old = old_file(str(traces / "evmbpf-1@old.jsonl"), MIB, 5)
    _, free = statvfs_bytes(str(traces))
    keep = (free >> 20) + 1024  # 1 GiB more than is free, in MiB
    token, script = wanted(tmp_path)
    rec = Recorder(traces, token, "--keep-free", f"{keep}M", pidfile=tmp_path / "pid")
    try:
        pid = run_raises(rec, script)
        rec.wait_for(rf"^evmbpf: {pid}: its trace is not written: ")
    finally:
        assert rec.stop() == 0, rec.stderr()
    err = rec.stderr()
    line = next(x for x in err.splitlines() if x.startswith(f"evmbpf: {pid}: its trace is "))
    assert f"{traces}/evmbpf-{pid}@{HOST}.jsonl" in line, line
    assert f"less than --keep-free {keep << 20}; no file was removed" in line, line
    assert "retention: removed" not in err, err
    assert files_of(str(traces)) == {"evmbpf-1@old.jsonl"}, files_of(str(traces))
    assert os.path.getsize(old) == MIB
    assert f"{keep << 20} bytes kept free there (--keep-free)" in err, err


def test_the_defaults_are_said(evmbpf, tmp_path):
    """Without --max-dir-size and --keep-free: 10% and 15% of DIR's file system, each at most
    4 GiB, said at the start."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o700)
    token, _ = wanted(tmp_path)
    rec = Recorder(traces, token, pidfile=tmp_path / "pid")
    assert rec.stop() == 0, rec.stderr()
    fs, _ = statvfs_bytes(str(traces))
    line = next(x for x in rec.lines if x.startswith("retention: "))
    assert line == (f"retention: the recorder's files in {traces} at most "
                    f"{default_part(fs, 10)} bytes (--max-dir-size: the default, 10% of its "
                    f"file system, at most 4G), the oldest removed first; its file system "
                    f"{fs} bytes, {default_part(fs, 15)} bytes kept free there (--keep-free: "
                    f"the default, 15% of it, at most 4G)\n"), line


@pytest.mark.parametrize("args,word", [
    (["--max-dir-size", "0"], "--max-dir-size"),
    (["--max-dir-size", "12X"], "--max-dir-size"),
    (["--keep-free", "-1"], "--keep-free"),
    (["--keep-free", "lots"], "--keep-free"),
])
def test_bad_sizes_refused(evmbpf, tmp_path, args, word):
    got = subprocess.run([EVMBPF, "record", "--dir", str(tmp_path / "traces"), "--match",
                          "evmbpf-retention-none", *args], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ,
                                              EVMBPF_RECORD_PIDFILE=str(tmp_path / "pid")))
    assert got.returncode == 2, got
    assert f"{word} must be a size" in got.stderr, got.stderr
    assert not (tmp_path / "traces").exists()


# ---------------------------------------------------------------- a flush, a kept trace

def test_a_flush_makes_its_room(evmbpf, tmp_path):
    """`evmbpf record --flush --pid PID` of a hung process: its live tail's room is made as
    a trace's is (the older of two old files goes, said, for its live tail), and it is
    written as evmbpf-PID@HOST.flush-1.jsonl; the process runs on."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o700)
    old_file(str(traces / "evmbpf-1@old.jsonl"), MIB, 6)
    old_file(str(traces / "evmbpf-2@old.jsonl"), MIB, 4)
    token, script = wanted(tmp_path, RECORD_ANY)
    flag, resume = str(tmp_path / "hung"), str(tmp_path / "resume")
    rec = Recorder(traces, token, "--max-dir-size", "1536K", "--keep-free", "0",
                   pidfile=tmp_path / "pid")
    proc = subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(clean_env(), RECORD_FORWARDS="3", RECORD_HANG_AT="1",
                                     RECORD_FLAG=flag, RECORD_RESUME=resume,
                                     RECORD_PAUSE="300"))
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(flag):
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the workload never hung"
            time.sleep(0.05)
        got = subprocess.run([EVMBPF, "record", "--flush", "--pid", str(proc.pid)],
                             capture_output=True, text=True, env=rec.env, timeout=60)
        assert got.returncode == 0, got.stderr
        path = str(traces / f"evmbpf-{proc.pid}@{HOST}.flush-1.jsonl")
        rec.wait_for(rf"^{proc.pid}: live tail in {re.escape(path)}")
        settled(path)
        assert proc.poll() is None, "the flushed process did not run on"
        open(resume, "w").close()
        proc.communicate(timeout=120)
        assert proc.returncode == 0, proc.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert rec.stop() == 0, rec.stderr()
    err = rec.stderr()
    assert re.search(rf"^retention: removed {re.escape(str(traces))}/evmbpf-1@old.jsonl "
                     rf"\({MIB} bytes, 6.0 days old\), the oldest of the recorder's files, for "
                     rf"{proc.pid}'s live tail \(\d+ bytes\): --max-dir-size 1572864 ",
                     err, re.M), err
    assert recorded_why(path) == "flush: the process runs on"
    assert files_of(str(traces)) == {"evmbpf-2@old.jsonl", os.path.basename(path)}


def fill(path):
    """Zeros written into path until its file system is full (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def test_a_kept_trace_makes_its_room(evmbpf, tmp_path):
    """A full disk (a 256 KiB tmpfs, filled; --keep-free 0: the free space not looked at)
    keeps the trace in memory. Meanwhile an old file of 40 KiB becomes root's (another
    user's until then: not counted), and the disk has room again: the kept trace's try
    makes its room first, the old file goes past --max-dir-size 32K (said), and the trace
    is written."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "evmbpf-retention", str(small)],
                   check=True)
    try:
        traces = small / "traces"
        traces.mkdir(mode=0o700)
        old = old_file(str(traces / "evmbpf-1@old.jsonl"), 40 << 10, 3, owner=65534)
        fill(small / "filler")
        token, script = wanted(tmp_path)
        rec = Recorder(traces, token, "--max-dir-size", "32K", "--keep-free", "0",
                       pidfile=tmp_path / "pid")
        try:
            pid = run_raises(rec, script)
            path = traces / f"evmbpf-{pid}@{HOST}.jsonl"
            rec.wait_for(rf"^{pid}: its trace \(exit status 1\) is kept in memory")
            assert os.path.exists(old) and not path.exists()
            os.chown(old, 0, 0)
            os.unlink(small / "filler")
            rec.wait_for(rf"^{pid}: trace in {re.escape(str(path))} \(exit status 1\), "
                         r"written once there was room")
            settled(str(path))
        finally:
            assert rec.stop() == 0, rec.stderr()
        err = rec.stderr()
        assert re.search(rf"^retention: removed {re.escape(old)} \({40 << 10} bytes, 3.0 days "
                         rf"old\), the oldest of the recorder's files, for {pid}'s trace "
                         r"\(\d+ bytes\): --max-dir-size 32768 ", err, re.M), err
        assert not os.path.exists(old)
        assert recorded_why(str(path)) == "exit status 1"
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
