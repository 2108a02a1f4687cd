"""Every process of a multi-process job: real gloo jobs on CPU (tests/workloads/ranks_job.py),
started by torch.multiprocessing.spawn on the host (and by torchrun in the trixie chroot
with EVMBPF_FULL_RANKS=1), traced by one evmbpf (--follow, several --pid), each rank's
trace compared event for event with the reference tracer run in that rank."""
import glob
import json
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, RUN_WORKLOAD,
                            CHROOT_SH, chroot_ensure, compare_traces, load, torch_major,
                            wait_for_line)

pytestmark = pytest.mark.root  # runs the tracer: loads BPF programs

JOB = os.path.join(OWN_WORKLOADS, "ranks_job.py")
FULL = os.environ.get("EVMBPF_FULL_RANKS") == "1"
PORTS = iter(range(29700, 29900))


def job_cmd(outdir, *extra, python=HOST_PYTHON, prefix=()):
    return [*prefix, python, JOB, outdir, "--port", str(next(PORTS)), *extra]


def rank_pids(outdir):
    pids = {}
    for path in glob.glob(os.path.join(outdir, "rank*.pid")):
        rank = int(re.search(r"rank(\d+)\.pid$", path).group(1))
        with open(path) as handle:
            pids[rank] = int(handle.read())
    return pids


def reference_job(world, tmp, *extra, python=HOST_PYTHON, prefix=()):
    refdir = os.path.join(tmp, "ref")
    os.makedirs(refdir, exist_ok=True)
    r = subprocess.run(job_cmd(refdir, "--world", str(world), "--reference", *extra,
                               python=python, prefix=prefix),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return {rank: load(os.path.join(refdir, f"ref-rank{rank}.jsonl")) for rank in range(world)}


def header(trace):
    return trace[0]["tracer"]


def check_job(world, tmp, outdir, refs):
    pids = rank_pids(outdir)
    assert sorted(pids) == list(range(world))
    for rank, pid in pids.items():
        got = load(os.path.join(outdir, f"t-{pid}.jsonl"))
        assert header(got)["pid"] == pid
        compare_traces(refs[rank], got)
    return pids


@pytest.mark.parametrize("world", [2, 4] if FULL else [2])
def test_spawn_follow_every_rank(world, tmp_path):
    """launch --follow of a torch.multiprocessing.spawn job: one trace per process, each
    rank's equal to the reference's in that rank; the header names parent and rank. Each
    rank forks a worker (no exec) that calls modules: it is traced too, from its first
    instruction after the fork."""
    tmp = str(tmp_path)
    refs = reference_job(world, tmp, "--fork-worker")
    outdir = os.path.join(tmp, "ev")
    os.makedirs(outdir)
    r = subprocess.run([EVMBPF, "--follow", "--out", os.path.join(outdir, "t-%p.jsonl"), "--",
                        *job_cmd(outdir, "--world", str(world), "--fork-worker")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    pids = check_job(world, tmp, outdir, refs)
    traces = [load(p) for p in glob.glob(os.path.join(outdir, "t-*.jsonl"))]
    launcher = {header(t)["ppid"] for t in traces if header(t)["pid"] in pids.values()}
    workers = [t for t in traces if header(t)["ppid"] in pids.values()]
    assert sorted(header(t)["ppid"] for t in workers) == sorted(pids.values())
    for worker in workers:
        assert [(e["event"], e["module"]) for e in worker if e["event"] in ("enter", "exit")] == [
            ("enter", "<root>"), ("enter", "0"), ("exit", "0"), ("enter", "1"), ("exit", "1"),
            ("exit", "<root>")]
    assert len(launcher) == 1  # the ranks' parent: the spawning process, traced too
    parent = load(os.path.join(outdir, f"t-{launcher.pop()}.jsonl"))
    assert [e["event"] for e in parent] == ["header"]
    assert all(header(load(p))["rank"] is None
               for p in glob.glob(os.path.join(outdir, "t-*.jsonl")))
    s = subprocess.run([EVMBPF, "summarize", outdir], capture_output=True, text=True)
    assert s.returncode == 0, s.stderr
    assert s.stdout.startswith(f"job: {len(glob.glob(os.path.join(outdir, 't-*.jsonl')))} processes\n")
    for pid in pids.values():
        assert re.search(rf"^  -\s+{pid}\s+\d+\s+3\s+finished ", s.stdout, re.M), s.stdout
    for worker in workers:
        assert re.search(rf"^  -\s+{header(worker)['pid']}\s+\d+\s+1\s+finished ", s.stdout,
                         re.M), s.stdout
    assert "no process failed" in s.stdout


def test_kill_rank_after_attach(tmp_path):
    """--pid of a launcher with --follow: its ranks start after the attach and are traced
    from their first instruction; rank 1 is SIGKILLed in the middle of a forward while
    rank 0 waits in all_reduce: rank 1's trace ends with SIGKILL and its stack unwound,
    rank 0's is complete, and summarize DIR says who failed first and where."""
    tmp = str(tmp_path)
    outdir = os.path.join(tmp, "ev")
    os.makedirs(outdir)
    go = os.path.join(tmp, "go")
    job = subprocess.Popen(job_cmd(outdir, "--world", "2", "--kill-rank", "1", "--wait-for",
                                   go),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = job.stdout.readline()
    launcher = int(re.match(r"ready pid=(\d+)", line).group(1))
    tracer = subprocess.Popen([EVMBPF, "--pid", str(launcher), "--follow", "--out",
                               os.path.join(outdir, "t-%r-%p.jsonl")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_line(tracer.stderr, "attached to", 120)
    open(go, "w").close()
    job.communicate(timeout=900)
    assert job.returncode != 0  # spawn's join raises: a rank was killed
    terr = tracer.communicate(timeout=300)[1]
    assert tracer.returncode == 0, terr
    pids = rank_pids(outdir)
    killed = load(os.path.join(outdir, f"t--{pids[1]}.jsonl"))
    errors = [e for e in killed if e["event"] == "error"]
    assert [e["exc_type"] for e in errors] == ["SIGKILL"]
    unwound = [e["module"] for e in killed if e["event"] == "unwound"]
    assert sorted(unwound) == ["<root>", "killer"], unwound
    assert killed[-1]["event"] == "unwound"
    other = load(os.path.join(outdir, f"t--{pids[0]}.jsonl"))  # every line parses
    assert sum(e["event"] == "forward" for e in other) >= 2
    s = subprocess.run([EVMBPF, "summarize", outdir], capture_output=True, text=True)
    assert s.returncode == 0, s.stderr
    assert f"failed first: rank -, pid {pids[1]} (SIGKILL" in s.stdout, s.stdout
    assert re.search(rf"^  rank -, pid {pids[0]}: ", s.stdout, re.M), s.stdout


def test_two_independent_jobs_by_pid(tmp_path):
    """--pid A,B: two unrelated single-process jobs at once, each its own trace, each equal
    to the reference's trace of the same workload."""
    tmp = str(tmp_path)
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    ref = os.path.join(tmp, "ref.jsonl")
    r = subprocess.run([HOST_PYTHON, RUN_WORKLOAD, workload, "--trace", ref],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    go = os.path.join(tmp, "go")
    jobs = [subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, workload, "--wait-for", go],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    pids = [int(re.match(r"ready pid=(\d+)", j.stdout.readline()).group(1)) for j in jobs]
    out = os.path.join(tmp, "t-%p.jsonl")
    tracer = subprocess.Popen([EVMBPF, "--pid", str(pids[0]), "--pid", str(pids[1]),
                               "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    wait_for_line(tracer.stderr, f"attached to {pids[0]}", 120)
    wait_for_line(tracer.stderr, f"attached to {pids[1]}", 120)
    open(go, "w").close()
    for j in jobs:
        j.communicate(timeout=300)
        assert j.returncode == 0
    terr = tracer.communicate(timeout=120)[1]
    assert tracer.returncode == 0, terr
    for pid in pids:
        got = load(os.path.join(tmp, f"t-{pid}.jsonl"))
        assert header(got)["pid"] == pid
        compare_traces(load(ref), got, kwargs=torch_major() >= 2)  # torch 1: no kwargs


def test_several_processes_need_a_pattern(tmp_path):
    """Several processes and one file name: refused up front, in one line."""
    out = str(tmp_path / "t.jsonl")
    for args in (["--pid", "1,2", "--out", out], ["--pid", "1", "-p", "2", "--out", out],
                 ["--follow", "--out", out, "--", "true"]):
        r = subprocess.run([EVMBPF, *args], capture_output=True, text=True)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "%p" in r.stderr, r.stderr
    r = subprocess.run([EVMBPF, "--pid", "1", "--out", str(tmp_path / "t-%x.jsonl")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.skipif(not FULL, reason="EVMBPF_FULL_RANKS=1: torchrun in the trixie chroot")
@pytest.mark.parametrize("world", [2, 4])
def test_torchrun_trixie(world, tmp_path):
    """torchrun (torch 2.6, built without libuv) in the trixie chroot: RANK names the files
    (%r), each rank's trace equals the reference's. Neither rendezvous backend passes
    USE_LIBUV=0 to its TCPStore: the c10d backend with a FileStore (store_type=file) and
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 avoid both; the workers' env:// store reads
    USE_LIBUV."""
    err = chroot_ensure("trixie")
    if err:
        pytest.skip(f"trixie chroot: {err}")
    tmp = os.path.realpath(str(tmp_path))
    env = dict(os.environ, EVMBPF_CHROOT_BIND=f"{tmp}:/evmbpf/out", USE_LIBUV="0")
    guest_job = "/evmbpf/main/tests/workloads/ranks_job.py"

    def torchrun(outdir, *extra):
        return [CHROOT_SH, "run", "trixie", "env", "USE_LIBUV=0",
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", "python3", "-m",
                "torch.distributed.run", "--nnodes=1", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=/evmbpf/out/{outdir}.rdzv", "--rdzv-conf", "store_type=file",
                "--local-addr=127.0.0.1", f"--nproc-per-node={world}",
                guest_job, "/evmbpf/out/" + outdir, "--torchrun", *extra]

    os.makedirs(os.path.join(tmp, "ref"))
    r = subprocess.run(torchrun("ref", "--reference"), capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    os.makedirs(os.path.join(tmp, "ev"))
    r = subprocess.run([EVMBPF, "--follow", "--out", os.path.join(tmp, "ev", "r%r-%p.jsonl"),
                        "--", *torchrun("ev")], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in range(world):
        got = [p for p in glob.glob(os.path.join(tmp, "ev", f"r{rank}-*.jsonl"))]
        assert len(got) == 1, got
        trace = load(got[0])
        assert header(trace)["rank"] == rank
        compare_traces(load(os.path.join(tmp, "ref", f"ref-rank{rank}.jsonl")), trace)
