"""--cupti without a GPU: the agent's build, the launch of CPU jobs with it (real Python,
real torch, real BPF probes; the agent loaded into a real process, with the real libcupti
where there is one), the refusal with --pid, the attribution of kernels to module calls
from recorded sequences (`evmbpf cupti-replay`, through the agent's ring), and a trace
carrying the GPU events read by the reference reader. The device runs are in
scripts/gpu/cupti.sh."""
import glob
import json
import os
import subprocess
import sys

import pytest

from evmbpf_testlib import (EVMBPF, OWN_WORKLOADS, REFERENCE, ROOT, compare_traces, load,
                            run_launch)

sys.path.insert(0, REFERENCE)
from evalmetry import debug  # noqa: E402

AGENT = os.path.join(os.path.dirname(EVMBPF), "evmbpf-cupti.so")
INJECT = os.path.join(OWN_WORKLOADS, "cupti_inject.py")
LIBCUPTI = sorted(glob.glob("/usr/local/cuda*/lib*/libcupti.so.*") +
                  glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so.*"))

need_agent = pytest.mark.skipif(not os.path.exists(AGENT),
                                reason="no CUPTI headers: the agent was not built")


@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    """The workloads launched without --cupti, once for the module's tests."""
    d = tmp_path_factory.mktemp("plain")
    runs = {}
    path = str(d / "inject.jsonl")
    got = run_launch(INJECT, path)
    assert got.returncode == 0, got.stderr
    return {"inject": path}


def replay(text):
    return subprocess.run([EVMBPF, "cupti-replay"], input=text, capture_output=True,
                          text=True, timeout=60)


def events_of(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


# ---- the build ----

@need_agent
def test_agent_exports_initialize_injection_and_needs_no_libcupti_to_load():
    lines = subprocess.run(["nm", "-D", "--defined-only", AGENT], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    # only the entry point is exported: nothing of the agent can clash with the job's
    assert [line.split()[-1] for line in lines] == ["InitializeInjection"]
    needed = subprocess.run(["readelf", "-d", AGENT], capture_output=True, text=True,
                            check=True).stdout
    assert "libcupti" not in needed and "libcuda" not in needed


def test_agent_builds_against_debians_headers(tmp_path):
    inc = subprocess.run([os.path.join(ROOT, "scripts", "cupti-headers.sh"), "path"],
                         capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.exists(os.path.join(inc, "cupti.h")):
        pytest.skip("scripts/cupti-headers.sh ensure has not run")
    out = tmp_path / "agent.so"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
                    "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-shared",
                    "-I" + os.path.join(ROOT, "include"), "-I" + inc,
                    os.path.join(ROOT, "agent", "agent.c"), "-ldl", "-o", str(out)],
                   check=True, capture_output=True, text=True)
    assert "InitializeInjection" in subprocess.run(["nm", "-D", str(out)], capture_output=True,
                                                   text=True).stdout


# ---- the command line ----

def test_cupti_with_pid_is_refused_in_one_line():
    got = subprocess.run([EVMBPF, "--cupti", "--pid", "1", "--out", "/dev/null"],
                         capture_output=True, text=True, timeout=30)
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1
    assert "launch mode" in got.stderr and "mem" in got.stderr and "--pid" in got.stderr


# ---- launched CPU jobs ----

@need_agent
def test_cpu_job_with_cupti_is_traced_as_without_it(tmp_path, plain_runs):
    plain, with_cupti = plain_runs["inject"], str(tmp_path / "cupti.jsonl")
    b = run_launch(INJECT, with_cupti, evmbpf_args=["--cupti"])
    assert b.returncode == 0, b.stderr
    compare_traces(load(plain), load(with_cupti))
    assert "--cupti: the command never initialised CUDA" in b.stderr
    assert b.stderr.count("--cupti") == 1
    assert not [e for e in load(with_cupti) if e["event"].startswith("gpu")]


@need_agent
@pytest.mark.parametrize("lib", ["missing", "real"])
def test_agent_in_a_real_process_gives_up_and_the_job_runs_on(tmp_path, lib, plain_runs):
    """The agent loaded as the driver loads it, with no libcupti, and with the real one
    (no driver here: cuptiSubscribe fails): one warning, the trace as without it."""
    if lib == "real" and not LIBCUPTI:
        pytest.skip("no libcupti on this machine")
    env = dict(os.environ, EVMBPF_TEST_INJECT="1", EVMBPF_CUPTI_LIB="/nonexistent/libcupti.so" if lib == "missing"
               else LIBCUPTI[-1])
    plain, with_cupti = plain_runs["inject"], str(tmp_path / "cupti.jsonl")
    b = run_launch(INJECT, with_cupti, evmbpf_args=["--cupti"], env=env)
    assert b.returncode == 0, b.stderr
    assert "InitializeInjection: 1" in b.stdout
    compare_traces(load(plain), load(with_cupti))
    warnings = [line for line in b.stderr.splitlines() if "--cupti" in line]
    assert len(warnings) == 1, b.stderr
    assert warnings[0].endswith("the trace goes on without GPU activity")
    assert ("no libcupti" if lib == "missing" else "cuptiSubscribe") in warnings[0]


@need_agent
def test_another_injection_is_left_alone(tmp_path, plain_runs):
    env = dict(os.environ, CUDA_INJECTION64_PATH="/opt/other/libinject.so")
    path = str(tmp_path / "cupti.jsonl")
    got = run_launch(INJECT, path, evmbpf_args=["--cupti"], env=env)
    assert got.returncode == 0, got.stderr
    warnings = [line for line in got.stderr.splitlines() if "--cupti" in line]
    assert len(warnings) == 1 and "/opt/other/libinject.so" in warnings[0], got.stderr
    compare_traces(load(plain_runs["inject"]), load(path))


# ---- attribution from recorded sequences ----

NESTED = """\
enter 10 1 <root> 100
enter 10 2 layers.0 110
api 10 5 115
exit 10 2 120
api 10 6 125
enter 11 3 head 112
api 11 7 113
kernel 5 1000 1500
kernel 6 2000 2100
kernel 7 3000 3001
kernel 99 10 20
memcpy 6 0 50 4096
memset 5 0 5 128
exit 10 1 200
lost 3
at 10 111
at 10 121
at 10 300
at 11 113
at 12 113
"""


def test_kernels_go_to_the_call_running_on_the_launching_thread():
    got = replay(NESTED)
    assert got.returncode == 0, got.stderr
    ats = [line for line in got.stdout.splitlines() if line.startswith("at ")]
    assert ats == ["at 2", "at 1", "at -", "at 3", "at -"]
    ev = {e.get("call", "summary"): e for e in events_of(got.stdout)}
    root, layer, head, summary = ev[1], ev[2], ev[3], ev["summary"]
    assert (layer["module"], layer["kernels"], layer["gpu_ns"], layer["memset_bytes"]) == \
        ("layers.0", 1, 500, 128)
    # the root: its own kernel (100 ns) and its child's; the copy launched in it
    assert (root["kernels"], root["gpu_ns"], root["self_kernels"], root["self_gpu_ns"]) == \
        (2, 600, 1, 100)
    assert (root["memcpy"], root["memcpy_bytes"], root["memcpy_ns"]) == (1, 4096, 50)
    assert (head["kernels"], head["gpu_ns"]) == (1, 1)
    # every kernel counted once: the calls' own times and what no call launched add up
    assert summary["kernels"] == 4 and summary["gpu_ns"] == 611
    assert (summary["unattributed_kernels"], summary["unattributed_gpu_ns"]) == (1, 10)
    assert summary["gpu_ns"] == sum(e["self_gpu_ns"] for e in ev.values() if "self_gpu_ns" in e) \
        + summary["unattributed_gpu_ns"]
    assert summary["dropped"] == 3


def test_activity_read_before_its_module_events_is_attributed_the_same():
    """The agent's ring and the BPF ring are read apart: the records of a call may come
    before the call's own events; attribution happens at the end, by time."""
    lines = NESTED.splitlines()
    agent = [line for line in lines if line.split()[0] in ("api", "kernel", "memcpy", "memset")]
    calls = [line for line in lines if line.split()[0] in ("enter", "exit")]
    got = replay("\n".join(agent + calls) + "\n")
    want = replay("\n".join(calls + agent) + "\n")
    assert got.returncode == 0 and got.stdout == want.stdout
    assert events_of(got.stdout)[0]["kernels"] == 2


def test_frames_an_exception_left_end_with_their_caller():
    got = replay("enter 1 1 <root> 0\nenter 1 2 bad 10\n"        # bad raised: no exit
                 "exit 1 1 50\napi 1 9 60\nkernel 9 0 7\n"         # after the root's exit
                 "enter 1 3 <root> 70\napi 1 10 80\nkernel 10 0 3\nexit 1 3 90\n"
                 "at 1 20\nat 1 60\nat 1 80\n")
    assert got.returncode == 0, got.stderr
    assert [l for l in got.stdout.splitlines() if l.startswith("at")] == \
        ["at 2", "at -", "at 3"]
    summary = events_of(got.stdout)[-1]
    assert summary["unattributed_kernels"] == 1 and summary["kernels"] == 2


def test_a_full_ring_drops_and_counts_without_waiting():
    body = "ring 4\nenter 1 1 <root> 0\n" + "".join(
        f"api 1 {n} 5\n" for n in range(1, 11)) + "flush\n" + "".join(
        f"kernel {n} 0 10\n" for n in range(1, 5)) + "exit 1 1 100\n"
    got = replay(body)
    assert got.returncode == 0, got.stderr
    summary = events_of(got.stdout)[-1]
    assert summary["dropped"] == 6           # 10 api records into 4 slots
    assert summary["kernels"] == 4 and summary["unattributed_kernels"] == 0


def test_replay_rejects_a_bad_line():
    got = replay("enter 1 1 <root> 0\nkernel x\n")
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == ["evmbpf: cupti-replay: line 2: cannot read 'kernel x'"]


# ---- the trace extension and the readers ----

def test_reference_reader_reads_a_trace_with_gpu_events(tmp_path, plain_runs):
    """A real trace, its module calls replayed with one kernel launched in each, and the
    gpu events appended as the collector writes them."""
    path = str(tmp_path / "t.jsonl")
    with open(plain_runs["inject"]) as src, open(path, "w") as dst:
        dst.write(src.read())
    events = load(path)
    enters = [e for e in events if e["event"] == "enter"]
    seq = []
    for e in events:
        if e["event"] == "enter":
            seq += ["enter %d %d %s %d" % (e["tid"], e["call"], e["module"], e["ts_ns"]),
                    "api %d %d %d" % (e["tid"], e["call"], e["ts_ns"] + 1),
                    "kernel %d 0 %d" % (e["call"], e["call"])]
        elif e["event"] == "exit":
            seq.append("exit %d %d %d" % (e["tid"], e["call"], e["ts_ns"]))
    gpu = events_of(replay("\n".join(seq) + "\n").stdout)
    assert len(gpu) == len(enters) + 1
    last = events[-1]["i"]
    with open(path, "a") as handle:
        for n, e in enumerate(gpu, 1):
            e["i"] = last + n
            handle.write(json.dumps(e) + "\n")
    assert len(debug.read_trace(path)) == len(events) + len(gpu)
    text = debug.summarize_trace(path)
    ours = subprocess.run([EVMBPF, "summarize", path], capture_output=True, text=True)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == text.replace("  evalmetry debug ", "  evmbpf show ") + "\n"
    # and but for the count of events it is the text without them
    plain = str(tmp_path / "plain.jsonl")
    with open(plain, "w") as handle:
        handle.writelines(json.dumps(e) + "\n" for e in events)
    before = debug.summarize_trace(plain).replace(plain, path).splitlines()
    after = text.splitlines()
    assert after[1:] == before[1:]
    assert after[0] == before[0].replace(f"({len(events)} events", f"({len(events) + len(gpu)} events")
    # each forward's root carries all its calls' kernels
    for e in gpu[:-1]:
        n = sum(1 for x in enters if x["forward"] == next(
            y["forward"] for y in enters if y["call"] == e["call"]))
        if e["module"] == "<root>":
            assert e["kernels"] == n
    assert gpu[-1]["kernels"] == len(enters) and gpu[-1]["unattributed_kernels"] == 0


# ---- the device statistics' host-side reference ----

def _stats_cases():
    import torch
    g = torch.Generator().manual_seed(0)
    big = torch.randn(10007, generator=g, dtype=torch.float64) * 3 + 1
    big[::97] = float("nan")
    big[5::301] = float("inf")
    big[7::503] = float("-inf")
    return [
        ("small", torch.tensor([3.0, 1.0, float("nan"), 2.0, float("-inf"), 4.0])),
        ("even count", torch.tensor([4.0, -1.0, 2.5, 2.5, 0.0, -0.0])),
        ("one value", torch.tensor([7.25])),
        ("no finite", torch.tensor([float("nan"), float("inf")])),
        ("float16", (torch.randn(333, generator=g) * 100).half()),
        ("bfloat16", (torch.randn(257, generator=g) * 1e3).bfloat16()),
        ("float32 wide", torch.randn(4096 * 3 + 5, generator=g) * 1e30),
        ("blocks, non-finite", big),
        ("constant", torch.full((9000,), -2.5)),
        ("int64 past 2^24", torch.tensor([2 ** 24 + 1, -(2 ** 30) - 3, 5])),
        ("bool", torch.tensor([True, False, True])),
        ("empty", torch.zeros(0)),
    ]


def test_device_stats_reference_matches_the_reference_tracer():
    """The reductions the agent will run on the device, in their block and radix-select
    order, against the reference's _tensor_stats (the CPU path's rules): counts, min, max
    and median equal, mean and std within 1e-9 relative."""
    import math
    import torch
    for name, t in _stats_cases():
        want = debug._tensor_stats(t)
        kind = "float" if t.is_floating_point() else "int"
        values = t.double().tolist() if kind == "float" else t.long().tolist()
        text = kind + "\n" + "".join(f"{v!r}\n" for v in values)
        got = subprocess.run([EVMBPF, "cupti-stats"], input=text, capture_output=True,
                             text=True, timeout=60)
        assert got.returncode == 0, got.stderr
        ours = json.loads(got.stdout)
        assert set(ours) == set(want), (name, ours, want)
        for key, value in want.items():
            if key in ("mean", "std") and value:
                assert math.isclose(ours[key], value, rel_tol=1e-9, abs_tol=0), (name, key)
            elif key in ("mean", "std"):
                assert abs(ours[key]) < 1e-12, (name, key, ours[key])
            else:
                assert ours[key] == value, (name, key, ours[key], value)
