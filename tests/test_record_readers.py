"""`evmbpf summarize DIR` over the directory `evmbpf record --dir DIR` writes
(docs/record.md): what died on the node, first failure first.

Offline, no root: the traces are written here by hand, as the recorder writes them (the
tail of each process that ended badly: no header once the tail has dropped it, ts_ns on
every event, the error event, the frames `unwound`). DIR/evmbpf-PID.jsonl for a lone
process, DIR/job-ID/evmbpf-PID-rankR.jsonl for a job's ranks, *.flush-K.jsonl for the
live tails `--flush` writes.
"""
import json
import os
import re
import shutil

import pytest

from evmbpf_testlib import ROOT, run_evmbpf

pytestmark = pytest.mark.usefixtures("evmbpf")   # conftest's: fails when it is not built

CORPUS = os.path.join(ROOT, "tests", "readers", "corpus")
T0 = 1796206091000000000   # 2026-12-02 10:08:11 UTC, in ns
S = 1000000000


def write_trace(path, pid, end=None, header=None, forwards=2, start=T0, reason=None,
                why=None):
    """A recorder's trace of pid: `forwards` whole forwards of one module, then a third
    entered and never returned. end: (exc_type, message, ts_ns) of its error event, or
    None (a live tail, or a process with no error). header: the tracer's part of a
    header (the tail still holds it), or None. why: the recorder's closing mark
    ({"event": "recorded", "why": ...}: why it wrote the file), or None."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines, ts = [], start
    if header is not None:
        lines.append({"event": "header", "trace_schema_version": "1.1",
                      "created": "2026-12-02T10:08:11+00:00",
                      "config": {"enabled": True, "modules": None, "numeric": False,
                                 "sync": False, "tail": 5000},
                      "model_type": None, "torch": "2.5.1", "cuda": False,
                      "tracer": {"name": "evmbpf", "pid": pid, "ppid": 1, **header}})
    arg = [{"shape": [2, 4], "dtype": "float32", "device": "cpu"}]

    def call(kind, forward, **more):
        return {"event": kind, "module": "<root>", "type": "Model", "depth": 0,
                "phase": "model_forward", "forward": forward, "call": forward, **more}

    for f in range(1, forwards + 2):
        lines.append({"event": "forward", "forward": f, "phase": "model_forward",
                      "samples": None, "batch_rows": None, "ts_ns": ts})
        ts += 1000
        lines.append(call("enter", f, args=arg, kwargs={}, mem=None, tid=pid, ts_ns=ts))
        if f <= forwards:
            ts += 1000
            lines.append(call("exit", f, output=arg[0], tid=pid, ts_ns=ts))
    if end:
        exc_type, message, ts = end
        lines.append({"event": "error", "exc_type": exc_type, "message": message,
                      "phase": "model_forward", "module": "<root>", "inspection": None,
                      "detected_at": None, "forward": forwards + 1, "samples": None,
                      "batch_rows": None, "mem": None, "traceback": [], "tid": pid,
                      "ts_ns": ts})
    lines.append(call("unwound", forwards + 1, args=arg, deepest=True,
                      reason=reason or ("process exited" if end and end[0].startswith("SIG")
                                        else "session ended"), tid=pid, ts_ns=ts))
    if why is not None:
        lines.append({"event": "recorded", "why": why, "pid": pid, "ts_ns": ts + 777})
    with open(path, "w") as handle:
        for i, line in enumerate(lines, 1):
            handle.write(json.dumps({**line, "i": i}) + "\n")
    return path


OOM = "the process was killed by signal 9 (Killed); the OOM killer chose it"


def node(tmp_path):
    """A node's directory: a job of three ranks (rank 1 OOM-killed first, rank 0's
    collective timing out 2 s later, rank 2 exiting 3 at 2.5 s), a lone process whose
    exception came next, a live tail, and last a trace with no error event (sys.exit(3)
    outside every module, the header still in its tail)."""
    d = str(tmp_path / "node")
    job = os.path.join(d, "job-42")
    files = {
        "lone": write_trace(os.path.join(d, "evmbpf-100.jsonl"), 100,
                            ("RuntimeError", "CUDA out of memory. Tried to allocate 2.00 GiB\n"
                             "second line", T0 + 5 * S)),
        "rank0": write_trace(os.path.join(job, "evmbpf-200-rank0.jsonl"), 200,
                             ("RuntimeError", "NCCL watchdog: collective timed out", T0 + 3 * S)),
        "rank1": write_trace(os.path.join(job, "evmbpf-201-rank1.jsonl"), 201,
                             ("SIGKILL", OOM, T0 + 1 * S)),
        "rank2": write_trace(os.path.join(job, "evmbpf-202-rank2.jsonl"), 202,
                             ("exit", "the process exited with status 3 while modules were "
                              "running (os._exit() or exit() in native code)",
                              T0 + 3 * S + S // 2)),
        "flush": write_trace(os.path.join(d, "evmbpf-300.flush-1.jsonl"), 300),
        "exit": write_trace(os.path.join(d, "evmbpf-400.jsonl"), 400, start=T0 + 10 * S,
                            header={"rank": None, "recorder": {"attached": "exec"}}),
    }
    return d, files


def summarize(*args):
    got = run_evmbpf("summarize", *args)
    assert got.returncode == 0, got.stderr
    return got.stdout


def sections(text):
    """The report's sections: {header line: its text up to the next section}."""
    parts = re.split(r"(?<=\n)\n(=== \d+ of \d+: .*) ===\n", text)
    return dict(zip(parts[1::2], parts[2::2]))


def test_first_failure_first(tmp_path):
    d, f = node(tmp_path)
    out = summarize(d)
    assert out.startswith(f"{d}: 5 processes ended badly, first failure first:\n")
    listed = re.findall(r"^  (\d)\. (\S+ \S+ UTC)  pid (\d+)", out, re.M)
    assert listed == [("1", "2026-12-02 10:08:12.000000 UTC", "201"),
                      ("2", "2026-12-02 10:08:14.000000 UTC", "200"),
                      ("3", "2026-12-02 10:08:14.500000 UTC", "202"),
                      ("4", "2026-12-02 10:08:16.000000 UTC", "100"),
                      ("5", "2026-12-02 10:08:21.000005 UTC", "400")], out
    assert ("pid 201, rank 1, job-42/  killed by the OOM killer: SIGKILL: " + OOM) in out
    assert "pid 200, rank 0, job-42/  an exception: RuntimeError: NCCL watchdog" in out
    assert "pid 202, rank 2, job-42/  a non-zero exit status: exit: the process exited " \
        "with status 3" in out
    # the message's first line only
    assert "pid 100, rank -  an exception: RuntimeError: CUDA out of memory. Tried to " \
        "allocate 2.00 GiB\n" in out
    assert "second line" not in out.split("\n=== ")[0]
    assert "pid 400, rank -  no error in the trace: a non-zero exit status outside every " \
        "module (sys.exit(N)), or --keep-all's\n" in out
    assert list(sections(out)) == [
        "=== 1 of 5: pid 201, rank 1, job-42/", "=== 2 of 5: pid 200, rank 0, job-42/",
        "=== 3 of 5: pid 202, rank 2, job-42/", "=== 4 of 5: pid 100, rank -",
        "=== 5 of 5: pid 400, rank -"]


def test_the_job_says_who_failed_first_and_how_long_before(tmp_path):
    d, _ = node(tmp_path)
    out = summarize(d)
    assert ("\nfailed first in its job, and how long before the others:\n"
            "  job-42/ (3 processes): rank 1 failed first (SIGKILL), 2.000 s before rank 0 "
            "(RuntimeError), 2.500 s before rank 2 (exit)\n") in out, out


def test_each_section_holds_the_single_file_summary(tmp_path):
    d, f = node(tmp_path)
    out = summarize(d)
    secs = sections(out)
    for key, head in (("rank1", "=== 1 of 5: pid 201, rank 1, job-42/"),
                      ("lone", "=== 4 of 5: pid 100, rank -")):
        text = secs[head]
        single = summarize(f[key])
        assert text.endswith("\n" + single), (text, single)
        assert text.startswith(f"file:   {f[key]}\n")
    rank1 = secs["=== 1 of 5: pid 201, rank 1, job-42/"]
    assert "\npid:    201   rank: 1   job: job-42\n" in rank1
    assert "\nwhen:   2026-12-02 10:08:12.000000 UTC (the error's ts_ns " \
        f"{T0 + S})\n" in rank1
    exited = secs["=== 5 of 5: pid 400, rank -"]
    assert "\nwhen:   2026-12-02 10:08:21.000005 UTC (the last event's ts_ns " \
        f"{T0 + 10 * S + 5000})\n" in exited
    assert exited.endswith("\n" + summarize(f["exit"]))
    assert "\nhow:    killed by the OOM killer: SIGKILL: " + OOM + "\n" in rank1
    # --tail reaches the sections' summaries
    out2 = summarize(d, "--tail", "2")
    assert sections(out2)["=== 4 of 5: pid 100, rank -"].endswith(
        "\n" + summarize(f["lone"], "--tail", "2"))


def test_live_tails_listed_apart(tmp_path):
    d, f = node(tmp_path)
    out = summarize(d)
    assert ("\n\nlive tails written on request (evmbpf record --flush; the processes ran "
            "on):\n  2026-12-02 10:08:11.000005 UTC  pid 300, rank -, flush 1, 9 events  "
            f"{f['flush']}\n\n=== 1 of 5") in out, out
    assert "pid 300" not in "".join(sections(out).values())


def test_a_live_tail_of_a_process_that_died_later(tmp_path):
    """The flush file is a tail, not a death, even with an error in it (a process that
    died while its tail was being written); the death is its own file."""
    d = str(tmp_path / "n")
    write_trace(os.path.join(d, "job-7", "evmbpf-11-rank0.flush-2.jsonl"), 11)
    write_trace(os.path.join(d, "job-7", "evmbpf-11-rank0.jsonl"), 11,
                ("ValueError", "bad", T0 + S))
    out = summarize(d)
    assert out.startswith(f"{d}: 1 process ended badly, first failure first:\n")
    assert "pid 11, rank 0, job-7/, flush 2, 9 events" in out
    assert list(sections(out)) == ["=== 1 of 1: pid 11, rank 0, job-7/"]
    # a job of one process: nothing to compare
    assert "failed first in its job" not in out


def test_header_names_pid_and_rank(tmp_path):
    """The tail still holds the header: the pid and rank are its tracer's, whatever the
    file is called."""
    d = str(tmp_path / "n")
    write_trace(os.path.join(d, "job-x", "renamed.jsonl"), 555, ("KeyError", "'x'", T0),
                header={"rank": 3, "recorder": {"attached": "running"}})
    out = summarize(d)
    assert "  1. 2026-12-02 10:08:11.000000 UTC  pid 555, rank 3, job-x/  an exception: " \
        "KeyError: 'x'\n" in out, out


def test_several_ranks_of_one_number(tmp_path):
    """A rank's forked workers inherit its RANK: the job names them by rank and pid."""
    d = str(tmp_path / "n")
    write_trace(os.path.join(d, "job-1", "evmbpf-20-rank0.jsonl"), 20, ("SIGSEGV",
                "the process was killed by signal 11 (Segmentation fault)", T0 + S))
    write_trace(os.path.join(d, "job-1", "evmbpf-21-rank0.jsonl"), 21, ("SIGKILL",
                "the process was killed by signal 9 (Killed)", T0 + S + S // 4))
    out = summarize(d)
    assert "  job-1/ (2 processes): rank 0 pid 20 failed first (SIGSEGV), 0.250 s before " \
        "rank 0 pid 21 (SIGKILL)\n" in out, out
    assert "killed by a signal: SIGSEGV: " in out


def test_traces_without_times_come_last_by_name(tmp_path):
    d = str(tmp_path / "n")
    os.makedirs(d)
    shutil.copy(os.path.join(CORPUS, "error_mem.jsonl"), os.path.join(d, "evmbpf-5.jsonl"))
    write_trace(os.path.join(d, "job-a", "evmbpf-6-rank0.jsonl"), 6, ("OSError", "x", T0))
    out = summarize(d)
    assert re.findall(r"^  \d\. .*?pid (\d+)", out, re.M) == ["6", "5"], out
    # the list cuts the message at 100 bytes; the section has its whole first line
    assert "  2. (no time recorded)  pid 5, rank -  an exception: OutOfMemoryError: CUDA out " \
        "of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; 77.12 " \
        "GiB already a...\n" in out, out
    assert sections(out)["=== 2 of 2: pid 5, rank -"].endswith(
        "\n" + summarize(os.path.join(d, "evmbpf-5.jsonl")))


def test_empty_recorder_directory_is_not_an_error(tmp_path):
    """A node where nothing died: the recorder's directory holds no trace (its job
    folders may be there). That is an answer, exit 0."""
    d = tmp_path / "n"
    (d / "job-9").mkdir(parents=True)
    got = run_evmbpf("summarize", str(d))
    assert got.returncode == 0 and got.stderr == ""
    assert got.stdout == (f"{d}: no trace: no process has ended badly here (the recorder "
                          "writes a trace only for a process that does)\n")


def test_running_recorders_directory(tmp_path):
    """An empty directory is the recorder's when the recorder running now (its pid file)
    was given it as --dir; otherwise it is a run directory without a trace, as before."""
    d = tmp_path / "logs"
    d.mkdir()
    got = run_evmbpf("summarize", str(d))
    assert got.returncode != 0 and "no trace under" in got.stderr
    pidfile = tmp_path / "record.pid"
    pidfile.write_text(f"{os.getpid()}\n")   # this process: its cmdline has no --dir
    env = dict(os.environ, EVMBPF_RECORD_PIDFILE=str(pidfile))
    got = run_evmbpf("summarize", str(d), env=env)
    assert got.returncode != 0 and "no trace under" in got.stderr
    # a stand-in recorder: a process whose command line says `record --dir DIR`
    import subprocess
    import sys
    stand_in = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()",
                                 "record", "--dir", str(d)], stdin=subprocess.PIPE)
    try:
        pidfile.write_text(f"{stand_in.pid}\n")
        got = run_evmbpf("summarize", str(d), env=env)
        assert got.returncode == 0, got.stderr
        assert got.stdout.startswith(f"{d}: no trace: no process has ended badly here")
    finally:
        stand_in.communicate(b"")


def test_damaged_trace_is_said_in_its_section(tmp_path):
    d = str(tmp_path / "n")
    path = write_trace(os.path.join(d, "evmbpf-7.jsonl"), 7, ("RuntimeError", "boom", T0))
    with open(path) as handle:
        lines = handle.readlines()
    lines.insert(2, "{not json\n")
    with open(path, "w") as handle:
        handle.writelines(lines)
    got = run_evmbpf("summarize", d)
    assert got.returncode == 0
    assert "=== 1 of 1: pid 7, rank -" in got.stdout
    # said once, by the section's summary, as summarize FILE says it
    assert got.stderr == run_evmbpf("summarize", path).stderr
    assert got.stderr.count(":3: corrupt line") == 1, got.stderr


# ---- what is not a recorder's directory reads as before ----

def test_a_jobs_directory_is_still_a_job(tmp_path):
    """--follow --out DIR/t-%p.jsonl: the job's summary, not the node's."""
    d = str(tmp_path / "job")
    write_trace(os.path.join(d, "t-1.jsonl"), 1, ("SIGKILL", "killed", T0))
    write_trace(os.path.join(d, "t-2.jsonl"), 2)
    out = summarize(d)
    assert out.startswith("job: 2 processes\n")
    assert out == summarize(os.path.join(d, "t-1.jsonl"), os.path.join(d, "t-2.jsonl"))


def test_follow_traces_with_recorder_names_keep_their_job_summary(tmp_path):
    """evmbpf-PID.jsonl files whose headers another evmbpf wrote (--follow --out
    evmbpf-%p.jsonl) are a job's traces."""
    d = str(tmp_path / "job")
    write_trace(os.path.join(d, "evmbpf-1.jsonl"), 1, ("SIGKILL", "killed", T0),
                header={"rank": None})
    write_trace(os.path.join(d, "evmbpf-2.jsonl"), 2, header={"rank": None})
    assert summarize(d).startswith("job: 2 processes\n")


def test_run_directory_and_single_file_unchanged(tmp_path):
    run = tmp_path / "run"
    (run / "debug").mkdir(parents=True)
    shutil.copy(os.path.join(CORPUS, "error_mem.jsonl"), run / "debug" / "trace.jsonl")
    single = summarize(str(run / "debug" / "trace.jsonl"))
    assert summarize(str(run)) == single.replace(str(run / "debug" / "trace.jsonl"), str(run))


# ---- the recorder's closing mark: why it wrote the file ----

def test_exit_status_from_the_recorders_mark(tmp_path):
    """sys.exit(3) outside every module leaves no error event: the mark names the status."""
    d = str(tmp_path / "n")
    path = write_trace(os.path.join(d, "evmbpf-8.jsonl"), 8, why="exit status 3")
    out = summarize(d)
    assert out.startswith(f"{d}: 1 process ended badly, first failure first:\n"
                          "  1. 2026-12-02 10:08:11.000005 UTC  pid 8, rank -  a non-zero exit "
                          "status: exit status 3\n"), out
    text = sections(out)["=== 1 of 1: pid 8, rank -"]
    assert "\nhow:    a non-zero exit status: exit status 3\n" in text
    assert "\nwhen:   2026-12-02 10:08:11.000005 UTC (the last event's ts_ns " \
        f"{T0 + 5000})\n" in text
    assert text.endswith("\n" + summarize(path))   # the mark is no event of the work


def test_mark_beside_an_error_and_a_signal(tmp_path):
    d = str(tmp_path / "n")
    write_trace(os.path.join(d, "evmbpf-9.jsonl"), 9, ("RuntimeError", "boom", T0 + S),
                why="exit status 1")
    write_trace(os.path.join(d, "evmbpf-10.jsonl"), 10,
                ("SIGKILL", "the process was killed by signal 9 (Killed)", T0),
                why="killed by signal 9, the OOM killer's choice")
    out = summarize(d)
    secs = sections(out)
    assert "\nhow:    an exception: RuntimeError: boom\nend:    exit status 1 (the " \
        "recorder's mark)\n" in secs["=== 2 of 2: pid 9, rank -"]
    # the OOM killer named by the mark alone
    assert "  1. 2026-12-02 10:08:11.000000 UTC  pid 10, rank -  killed by the OOM killer: " \
        "SIGKILL: the process was killed by signal 9 (Killed)\n" in out, out


def test_keep_all_healthy_ends_listed_apart(tmp_path):
    """--keep-all writes every tail: those of processes that exited 0, or still ran when
    the recorder stopped, did not end badly; in a job they still count for the timing."""
    d = str(tmp_path / "n")
    job = os.path.join(d, "job-5")
    write_trace(os.path.join(job, "evmbpf-30-rank0.jsonl"), 30, why="exit status 0",
                start=T0 + 4 * S)
    write_trace(os.path.join(job, "evmbpf-31-rank1.jsonl"), 31, ("ValueError", "nan", T0 + S),
                why="exit status 1")
    write_trace(os.path.join(d, "evmbpf-32.jsonl"), 32, why="still running")
    write_trace(os.path.join(d, "evmbpf-32.flush-1.jsonl"), 32,
                why="flush: the process runs on")
    out = summarize(d)
    assert out.startswith(f"{d}: 1 process ended badly, first failure first:\n"
                          "  1. 2026-12-02 10:08:12.000000 UTC  pid 31, rank 1, job-5/  an "
                          "exception: ValueError: nan\n"), out
    assert "  job-5/ (2 processes): rank 1 failed first (ValueError), 3.000 s before rank 0 " \
        "(exit status 0)\n" in out, out
    assert ("\nkept by --keep-all, not ended badly:\n"
            f"  2026-12-02 10:08:11.000005 UTC  pid 32, rank -, still running, 9 events  "
            f"{d}/evmbpf-32.jsonl\n"
            f"  2026-12-02 10:08:15.000005 UTC  pid 30, rank 0, job-5/, exit status 0, 9 events"
            f"  {job}/evmbpf-30-rank0.jsonl\n") in out, out
    assert "pid 32, rank -, flush 1, 9 events" in out
    assert list(sections(out)) == ["=== 1 of 1: pid 31, rank 1, job-5/"]


def test_a_later_process_of_a_pid(tmp_path):
    """evmbpf-PID.N.jsonl: a later process of a pid that had left a file (pids come round,
    and start afresh at a boot while the folder stays). Traces whose tails lost their
    headers, in one folder: the names alone say it is the recorder's, and give the pid
    and rank, .N included."""
    d = str(tmp_path / "n")
    write_trace(os.path.join(d, "evmbpf-30.jsonl"), 30, ("KeyError", "'a'", T0))
    write_trace(os.path.join(d, "evmbpf-30.2.jsonl"), 30, ("KeyError", "'b'", T0 + S))
    write_trace(os.path.join(d, "evmbpf-31-rank2.3.jsonl"), 31, ("OSError", "x", T0 + 2 * S))
    out = summarize(d)
    assert out.startswith(f"{d}: 3 processes ended badly, first failure first:\n"), out
    assert re.findall(r"^  \d\. .*?pid (\d+), rank (\S+?)  ", out, re.M) == [
        ("30", "-"), ("30", "-"), ("31", "2")], out


# ---- the host in the names: evmbpf-PID[-rankR]@HOST[.N][.flush-K].jsonl ----

def mark_host(path, host):
    """The recorder's closing mark, naming the process's host, added to a trace."""
    with open(path) as handle:
        n = sum(1 for _ in handle)
    with open(path, "a") as handle:
        handle.write(json.dumps({"event": "recorded", "why": "exit status 1",
                                 "process": {"command": ["python3", "train.py"], "host": host},
                                 "pid": 0, "ts_ns": T0, "i": n + 1}) + "\n")


def test_names_with_and_without_the_host(tmp_path):
    """Both the names of before the host was in them and the new ones give the pid, the
    rank and (the new ones) the host, .N and .flush-K included; a name whose host is empty,
    too long, or holds a character the recorder never writes is not the recorder's."""
    d = str(tmp_path / "n")
    os.makedirs(os.path.join(d, "job-x"))
    cases = [("evmbpf-10.jsonl", 1, "10", "-", None),
             ("evmbpf-11@node-a.jsonl", 2, "11", "-", "node-a"),
             ("evmbpf-12-rank3@node_b-1.2.jsonl", 3, "12", "3", "node_b-1"),
             ("job-x/evmbpf-13-rank0@N0.jsonl", 4, "13", "0", "N0"),
             ("evmbpf-14-rank2.3.jsonl", 5, "14", "2", None),
             ("evmbpf-15@.jsonl", 6, "?", "-", None),
             ("evmbpf-16@a.b.jsonl", 7, "?", "-", None),
             (f"evmbpf-17@{'h' * 65}.jsonl", 8, "?", "-", None),
             (f"evmbpf-18@{'h' * 64}.jsonl", 9, "18", "-", "h" * 64)]
    for name, k, pid, _, _ in cases:
        write_trace(os.path.join(d, name), int(pid) if pid != "?" else 99,
                    ("KeyError", name, T0 + k * S))
    write_trace(os.path.join(d, "evmbpf-11@node-a.flush-2.jsonl"), 11)
    write_trace(os.path.join(d, "job-x", "evmbpf-13-rank0@N0.4.flush-1.jsonl"), 13)
    out = summarize(d)
    listed = re.findall(r"^  \d\. \S+ \S+ UTC  pid (\S+), rank (\S+?)(?:, host (\S+?))?"
                        r"(?:, job-x/)?  ", out, re.M)
    assert listed == [(pid, rank, host or "") for _, _, pid, rank, host in cases], out
    assert "pid 11, rank -, host node-a, flush 2, 9 events" in out, out
    assert "pid 13, rank 0, host N0, job-x/, flush 1, 9 events" in out, out


def test_two_nodes_merged(tmp_path):
    """The folders of two nodes, copied into one: the same pids and the same job's folder,
    no name taken twice. The list, the job's line and the sections go by the time of the
    ends across both (epoch ns), each process with its host: the mark's where it names
    one (an FQDN, as the node calls itself), else the name's."""
    nodes = {"node-a": [("evmbpf-100.jsonl", 100, None, 4),
                        ("job-7/evmbpf-200-rank0.jsonl", 200, "0", 3)],
             "node-b": [("evmbpf-100.jsonl", 100, None, 1),
                        ("job-7/evmbpf-200-rank1.jsonl", 200, "1", 2)]}
    merged = tmp_path / "merged"
    for host, traces in nodes.items():
        src = tmp_path / host
        for name, pid, _, at in traces:
            named = name.replace(".jsonl", f"@{host}.jsonl")
            path = write_trace(str(src / named), pid, ("RuntimeError", f"{host} {pid}",
                                                       T0 + at * S))
            if host == "node-b" and pid == 100:
                mark_host(path, "node-b.example.com")
        shutil.copytree(src, merged, dirs_exist_ok=True)
    assert len(os.listdir(merged)) == 3 and len(os.listdir(merged / "job-7")) == 2
    out = summarize(str(merged))
    assert out.startswith(f"{merged}: 4 processes ended badly, first failure first:\n"), out
    listed = re.findall(r"^  \d\. (\S+ \S+) UTC  (pid .*?)  an exception: RuntimeError: "
                        r"(.*)$", out, re.M)
    assert listed == [
        ("2026-12-02 10:08:12.000000", "pid 100, rank -, host node-b.example.com",
         "node-b 100"),
        ("2026-12-02 10:08:13.000000", "pid 200, rank 1, host node-b, job-7/", "node-b 200"),
        ("2026-12-02 10:08:14.000000", "pid 200, rank 0, host node-a, job-7/", "node-a 200"),
        ("2026-12-02 10:08:15.000000", "pid 100, rank -, host node-a", "node-a 100")], out
    assert "  job-7/ (2 processes): rank 1 on node-b failed first (RuntimeError), 1.000 s " \
        "before rank 0 on node-a (RuntimeError)\n" in out, out
    secs = sections(out)
    assert list(secs) == ["=== 1 of 4: pid 100, rank -, host node-b.example.com",
                          "=== 2 of 4: pid 200, rank 1, host node-b, job-7/",
                          "=== 3 of 4: pid 200, rank 0, host node-a, job-7/",
                          "=== 4 of 4: pid 100, rank -, host node-a"], out
    first = secs["=== 1 of 4: pid 100, rank -, host node-b.example.com"]
    assert f"file:   {merged}/evmbpf-100@node-b.jsonl\n" in first
    assert "\nhost:   node-b.example.com\ncommand: python3 train.py\n" in first, first
    assert "\nhost:   node-a\n" in secs["=== 4 of 4: pid 100, rank -, host node-a"]
