"""The recorder and the tracer run as root and read every user's processes: what a
traced process names is hostile input. A traceback's file names come from the process
(`compile(src, PATH, "exec")`): evmbpf reads a source line with the target's own rights
(a child of evmbpf with its uid, gid and groups), a regular file only, opened without
blocking, bounded in size and time. Each case runs the process as nobody, traced by
--pid."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (HOST_PYTHON, OWN_WORKLOADS, load, own_rss, shared_folder,
                            wait_for_line)

pytestmark = pytest.mark.root

WORKLOAD = os.path.join(OWN_WORKLOADS, "hostile_traceback.py")


@pytest.fixture
def share():
    """A folder nobody can write in: the files its processes name, and their go files."""
    with shared_folder("evmbpf-hostile-", 0o777) as d:
        yield d


def traced_as_nobody(evmbpf, share, named, out, swap=()):
    """The workload as nobody naming `named`, evmbpf --pid on it (its --stats in
    out + ".stats"), released; returns (target, tracer)."""
    go = os.path.join(share, "go")
    target = subprocess.Popen(["runuser", "-u", "nobody", "--", HOST_PYTHON, WORKLOAD, named,
                               go, *swap], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=True)
    line = target.stdout.readline()
    pid = int(line.split("=")[1])
    # own_rss: --stats' maxrss_kb is evmbpf's getrusage(RUSAGE_SELF), which starts at the
    # peak of the process it was forked from (pytest's, over 1 GB in the whole suite)
    tracer = subprocess.Popen(own_rss([evmbpf, "--pid", str(pid), "--out", out, "--stats",
                                       out + ".stats"]),
                              stderr=subprocess.PIPE, text=True)
    wait_for_line(tracer.stderr, "attached to", 60)
    open(go, "w").close()
    return target, tracer


def finished(target, tracer, timeout=60):
    """The target's end, then evmbpf's (it writes the error event as the trace ends):
    evmbpf's stderr; a tracer still running after timeout s fails."""
    try:
        target.wait(timeout=timeout)
        _, err = tracer.communicate(timeout=timeout)
    finally:
        for p in (target, tracer):
            if p.poll() is None:
                p.kill()
    return err


def error_event(out):
    events = [e for e in load(out) if e["event"] == "error"]
    assert len(events) == 1, events
    return events[0]


def prepared(share, name, make):
    """share/name a regular file (what the target's own traceback reads), and share/name.next
    made by make(): moved over it once that traceback is printed."""
    path = os.path.join(share, name)
    with open(path, "w") as handle:
        handle.write("line one\nline two\n")
    os.chmod(path, 0o666)
    make(path + ".next")
    return path, (path + ".next",)


def test_root_only_file_is_not_read(evmbpf, share, tmp_path):
    """A root-only file named by nobody's traceback: its line is not in the trace (nobody
    cannot read it); the lines of the files nobody can read are."""
    secret = os.path.join(share, "secret")
    with open(secret, "w") as handle:
        handle.write("line one\nTHE-SECRET-LINE\n")
    os.chmod(secret, 0o600)
    out = str(tmp_path / "t.jsonl")
    target, tracer = traced_as_nobody(evmbpf, share, secret, out)
    err = finished(target, tracer)
    text = "".join(error_event(out)["traceback"])
    assert "THE-SECRET-LINE" not in text, text
    assert f'File "{secret}", line 2, in f\n' in text, (text, err)
    assert "M()(torch.zeros(1))" in text, text  # the workload's own line: nobody reads it


def test_fifo_does_not_block(evmbpf, share, tmp_path):
    """The file a traceback names is a FIFO by the time evmbpf reads it (no writer): not
    opened for reading, which would block evmbpf; the trace ends at once."""
    path, swap = prepared(share, "fifo", lambda p: os.mkfifo(p, 0o666))
    out = str(tmp_path / "t.jsonl")
    target, tracer = traced_as_nobody(evmbpf, share, path, out, swap)
    finished(target, tracer)
    text = "".join(error_event(out)["traceback"])
    assert f'File "{path}", line 2, in f\n' in text, text
    assert "line two" not in text


def test_dev_zero_is_not_read(evmbpf, share, tmp_path):
    """The file a traceback names is a link to /dev/zero by the time evmbpf reads it: not
    a regular file, never read; evmbpf's memory stays what a trace needs."""
    path, swap = prepared(share, "zero", lambda p: os.symlink("/dev/zero", p))
    out = str(tmp_path / "t.jsonl")
    target, tracer = traced_as_nobody(evmbpf, share, path, out, swap)
    finished(target, tracer)
    text = "".join(error_event(out)["traceback"])
    assert f'File "{path}", line 2, in f\n' in text, text
    import json
    peak = json.load(open(out + ".stats"))["maxrss_kb"]  # evmbpf's own
    assert peak < 200 * 1024, f"evmbpf's peak resident size: {peak} kB"


def fake_torch(share, make_version):
    """share/torch/_C.<abi>.so (a copy of a stdlib extension: what a process maps under
    that name is its own choice) with version.py beside it made by make_version(path)."""
    import sysconfig
    torch_dir = os.path.join(share, "torch")
    os.mkdir(torch_dir)
    os.chmod(torch_dir, 0o755)
    ext = subprocess.run([HOST_PYTHON, "-c", "import _bz2; print(_bz2.__file__)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    lib = os.path.join(torch_dir, "_C" + ext[ext.index(".cpython"):])
    shutil.copy(ext, lib)
    os.chmod(lib, 0o755)
    make_version(os.path.join(torch_dir, "version.py"))
    return lib


def torch_version_dumped(evmbpf, lib):
    """What `evmbpf dump --json` says of torch's version in nobody's process that maps
    lib; the dump must end within 30 s."""
    import json
    target = subprocess.Popen(["runuser", "-u", "nobody", "--", HOST_PYTHON, "-c",
                               "import ctypes, os, sys, time; ctypes.CDLL(sys.argv[1]); "
                               "print(os.getpid(), flush=True); time.sleep(120)", lib],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pid = int(target.stdout.readline())
        dumped = subprocess.run([evmbpf, "dump", "--pid", str(pid), "--json"],
                                capture_output=True, text=True, timeout=30)
    finally:
        os.killpg(target.pid, signal.SIGKILL)
        target.wait()
    assert dumped.returncode == 0, dumped.stderr
    return json.loads(dumped.stdout)["torch"]


def write_version(text, mode):
    def make(path):
        with open(path, "w") as handle:
            handle.write(text)
        os.chmod(path, mode)
    return make


def test_torch_version_is_read_as_the_target(evmbpf, share):
    """torch's version is read from the version.py beside the file a process maps as
    torch/_C.*.so: a file of its user's choosing. Read with that user's rights, it gives
    the version nobody can read, and not a root-only file's line."""
    lib = fake_torch(share, write_version('"""x"""\n__version__ = "9.8.7"\n', 0o644))
    assert torch_version_dumped(evmbpf, lib) == "9.8.7"
    secret = os.path.join(share, "secret.py")
    write_version('__version__ = "THE-SECRET"\n', 0o600)(secret)
    version = os.path.join(os.path.dirname(lib), "version.py")
    os.unlink(version)
    os.symlink(secret, version)
    assert torch_version_dumped(evmbpf, lib) == "unknown"


def test_torch_version_fifo_does_not_block(evmbpf, share):
    """version.py a FIFO nobody writes to: never opened for reading (that would block
    evmbpf, and with it the recorder's every process); the version is unknown."""
    lib = fake_torch(share, lambda p: (os.mkfifo(p), os.chmod(p, 0o666)))
    assert torch_version_dumped(evmbpf, lib) == "unknown"


@pytest.mark.parametrize("how", ["writable", "sticky", "owned", "parent"])
def test_record_dir_others_can_write_is_refused(evmbpf, tmp_path, how):
    """evmbpf record --dir a folder someone else can write (0777, even sticky), one not
    owned by root, or one inside a folder another user owns: refused at once, named,
    nothing started."""
    folder = tmp_path / "traces"
    folder.mkdir(mode=0o755)
    if how == "writable":
        folder.chmod(0o777)
    elif how == "sticky":
        folder.chmod(0o1777)
    elif how == "owned":
        os.chown(folder, 65534, 65534)
    else:
        os.chown(tmp_path, 65534, 65534)
    env = dict(os.environ, EVMBPF_RECORD_PIDFILE=str(tmp_path / "pid"))
    result = subprocess.run([evmbpf, "record", "--dir", str(folder)], capture_output=True,
                            text=True, timeout=30, env=env)
    assert result.returncode == 1, result.stderr
    assert "use a folder that only root can write" in result.stderr, result.stderr
    assert "recording" not in result.stderr


GRAPH = os.path.join(OWN_WORKLOADS, "hostile_graph.py")


@pytest.mark.parametrize("kind,bound", [("shared", "entries in its _modules dicts"),
                                        ("deep", "of module names")])
def test_module_graph_is_bounded(evmbpf, tmp_path, kind, bound):
    """A module graph built to hurt its reader: 3,000 modules sharing one 3,000-entry
    _modules dict (9 M entries; was 29 s of the loop), or 63 levels of 250-character
    names above 20,000 leaves (300 MB of names; was 300 MB of evmbpf's memory). The read
    stops at its bound, says which, names what it read, and the root's call is traced;
    evmbpf's own peak resident size (--stats) stays under 200 MB."""
    out, stats = str(tmp_path / "t.jsonl"), str(tmp_path / "stats.json")
    result = subprocess.run(own_rss([evmbpf, "--out", out, "--stats", stats, "--", HOST_PYTHON,
                                     GRAPH, kind]), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "module tree was read up to evmbpf's bound (more than" in result.stderr
    assert bound in result.stderr, result.stderr
    events = load(out)
    assert [e["module"] for e in events if e["event"] == "enter"] == ["<root>"]
    # the trace says so too: its closing mark names the bound and what was named
    cut = [e for e in load(out, marks=True) if e["event"] == "unobservable"
           and e.get("what") == ["modules"]]
    assert len(cut) == 1 and bound in cut[0]["detail"] and cut[0]["named"] >= 1, cut
    import json
    peak = json.load(open(stats))["maxrss_kb"]  # evmbpf's own (getrusage RUSAGE_SELF)
    assert peak < 200 * 1024, f"evmbpf's peak resident size: {peak} kB"


NAMES = os.path.join(OWN_WORKLOADS, "hostile_names.py")


def on_terminal(argv):
    """argv's output as a terminal shows it (run on a pseudo-terminal)."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    return out


@pytest.mark.parametrize("command", [["summarize"], ["show", "--forward", "1"]])
def test_terminal_escapes_do_not_reach_the_terminal(evmbpf, tmp_path, command):
    """A module name and an exception message made of terminal commands: on a terminal,
    summarize and show write their control characters as escapes; through a pipe they
    write the bytes as the reference's readers do."""
    from evmbpf_testlib import RUN_WORKLOAD
    out = str(tmp_path / "t.jsonl")
    result = subprocess.run([evmbpf, "--out", out, "--", HOST_PYTHON, RUN_WORKLOAD, NAMES],
                            capture_output=True, text=True, timeout=300)
    assert "boom evil" in result.stderr, result.stderr
    shown = on_terminal([evmbpf, *command, out])
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\xc2\x9b" not in shown, shown
    assert b"evil\\x1b]0;pwned\\x07\\x1b[2J\\u009b31m\\x0dFAKE" in shown, shown
    piped = subprocess.run([evmbpf, *command, out], capture_output=True, timeout=60).stdout
    assert b"evil\x1b]0;pwned\x07" in piped


def test_recorder_files_stay_roots_under_sudo(evmbpf, share, tmp_path):
    """sudo evmbpf record (SUDO_UID set): a recorded process's file is root's, 0600, not
    the sudo user's (it holds another user's arguments)."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o755)
    env = dict(os.environ, EVMBPF_RECORD_PIDFILE=str(tmp_path / "pid"), SUDO_UID="65534",
               SUDO_GID="65534")
    rec = subprocess.Popen([evmbpf, "record", "--dir", str(traces), "--keep-all"],
                           stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for_line(rec.stderr, "recording", 120)
        secret = os.path.join(share, "secret")
        open(secret, "w").close()
        go = os.path.join(share, "go")
        target = subprocess.Popen([HOST_PYTHON, WORKLOAD, secret, go],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        pid = int(target.stdout.readline().split("=")[1])
        wait_for_line(rec.stderr, f"attached to {pid} ", 60)
        open(go, "w").close()
        target.wait(timeout=60)
        wait_for_line(rec.stderr, f"{pid}: trace in", 60)
    finally:
        rec.send_signal(signal.SIGTERM)
        rec.wait(timeout=60)
    files = [p for p in os.listdir(traces) if p.startswith(f"evmbpf-{pid}@")]
    assert len(files) == 1, os.listdir(traces)
    st = os.stat(traces / files[0])
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o600), st


def test_stale_pidfile_of_a_users_evmbpf_named_process(evmbpf, share, tmp_path):
    """A stale pid file whose pid a user's process took, that process named evmbpf-...:
    not taken for a running recorder; the recorder starts."""
    fake = os.path.join(share, "evmbpf-fake")
    shutil.copy("/bin/sleep", fake)
    os.chmod(fake, 0o755)
    squatter = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                 fake, "60"])
    try:
        time.sleep(0.2)
        with open(f"/proc/{squatter.pid}/comm") as handle:
            assert handle.read().startswith("evmbpf")
        pidfile = tmp_path / "pid"
        pidfile.write_text(f"{squatter.pid}\n")
        traces = tmp_path / "traces"
        traces.mkdir(mode=0o755)
        env = dict(os.environ, EVMBPF_RECORD_PIDFILE=str(pidfile))
        rec = subprocess.Popen([evmbpf, "record", "--dir", str(traces)],
                               stderr=subprocess.PIPE, text=True, env=env)
        try:
            seen = wait_for_line(rec.stderr, "recording", 120)
        finally:
            rec.send_signal(signal.SIGTERM)
            rec.wait(timeout=60)
        assert "another recorder runs" not in seen, seen
        assert squatter.poll() is None  # never signalled by the recorder
    finally:
        squatter.kill()
        squatter.wait()


def test_summarize_dir_does_not_follow_a_link(evmbpf, share, tmp_path):
    """A `.jsonl` link in a recorder's folder to a root-only file: summarize DIR does not
    follow it, and prints nothing of that file."""
    secret = tmp_path / "secret.jsonl"
    secret.write_text(
        '{"event": "header", "trace_schema_version": "1.1", "tracer": {"name": "evmbpf", '
        '"pid": 31337, "recorder": {"attached": "exec"}}}\n'
        '{"event": "forward", "forward": 1, "phase": "other", "i": 2, "tid": 31337, '
        '"ts_ns": 1796249303471465976}\n')
    secret.chmod(0o600)
    folder = tmp_path / "traces"
    folder.mkdir(mode=0o755)
    os.symlink(secret, folder / "evmbpf-4242.jsonl")
    result = subprocess.run([evmbpf, "summarize", str(folder)], capture_output=True,
                            text=True, timeout=60)
    assert "31337" not in result.stdout + result.stderr, result.stdout  # read from the file
    assert "unreadable" in result.stdout, result.stdout


FORGED = "7e0000000000-7e0000001000 r-xp 00000000 00:00 4242 "
MAPS_PATH_COLUMN = 73   # the kernel pads a maps line's fields to this column


def test_a_path_cannot_forge_a_maps_line(tmp_path):
    """A process maps two files whose paths carry a maps line of their own at the byte
    where a reader with a fixed buffer would cut the line (4,223: the PATH_MAX + 128 of
    evmbpf's earlier readers; 16,527: procmaps.c's): the cut's tail would read as a
    mapping at 0x7e0000000000. procmaps.c takes a line whole or not at all: the first
    file is read with its whole path, the second (a line longer than any path of
    PATH_MAX bytes can make) is skipped, and no forged mapping appears."""
    from evmbpf_testlib import TEST_AIDS
    script = tmp_path / "maps_forge.py"
    script.write_text(f"""
import mmap, os, sys, time
FORGED = {FORGED!r}
def mapped_at(base, forge_at):
    # directories under base until the forged component starts forge_at bytes into the line
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    length = {MAPS_PATH_COLUMN} + len(base) + 1
    while forge_at - length > 0:
        name = "d" * min(200, forge_at - length - 1) if forge_at - length > 1 else None
        if name is None:
            break
        os.mkdir(name, dir_fd=fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        length += len(name) + 1
    assert length == forge_at, (length, forge_at)
    for name in (FORGED, "forged"):
        os.mkdir(name, dir_fd=fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    lib = os.open("libforged.so", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(lib, b"\\0" * 4096)
    return mmap.mmap(lib, 4096, prot=mmap.PROT_READ)
keep = [mapped_at(sys.argv[1], 4223), mapped_at(sys.argv[2], 16527)]
print(os.getpid(), flush=True)
time.sleep(60)
""")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    p = subprocess.Popen([HOST_PYTHON, str(script), str(tmp_path / "a"), str(tmp_path / "b")],
                         stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline())
        with open(f"/proc/{pid}/maps") as handle:   # the construction, checked
            lines = sorted((line for line in handle.read().splitlines()
                            if "libforged.so" in line), key=len)
        assert len(lines) == 2
        assert [line.find(FORGED) for line in lines] == [4223, 16527], \
            [line.find(FORGED) for line in lines]
        r = subprocess.run([TEST_AIDS, "maps", str(pid)], capture_output=True, text=True,
                           timeout=60)
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    assert not [line for line in got if line.startswith("7e0000000000-")], "a forged mapping"
    assert not [line for line in got if line.startswith("error")], got[-1]
    forged = [line for line in got if "libforged.so" in line]
    assert len(forged) == 1 and forged[0].split(" ", 5)[5] == lines[0][MAPS_PATH_COLUMN:]
    assert str(tmp_path / "a") in forged[0]
    assert any(line.endswith(os.path.realpath(HOST_PYTHON)) for line in got)
