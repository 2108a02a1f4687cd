"""--cupti without a GPU: the agent's build, the launch of CPU jobs with it (real Python,
real torch, real BPF probes; the agent loaded into a real process, with the real libcupti
where there is one), the refusal with --pid, the attribution of kernels to module calls
from recorded sequences (`evmbpf-test-aids cupti-replay`, through the agent's ring), and
a trace carrying the GPU events read by the reference reader. --numeric's device
statistics: the kernels' PTX checked by ptxas, the same kernel bodies built for the host
against the reference tracer on random tensors of every dtype, and the channel collector
→ agent → ring end to end with a stand-in libcuda that runs those kernels on the host
(tests/cupti/). The aids are build/evmbpf-test-aids (tests/aids/). The device runs are in
scripts/gpu/cupti.sh."""
import glob
import json
import os
import subprocess
import sys

import pytest

from evmbpf_testlib import (AGENT, EVMBPF, FULL_MATRIX, OWN_WORKLOADS, REFERENCE, ROOT, TEST_AIDS,
                            compare_traces, load, proc_state, run_launch, without_machine_notes)

sys.path.insert(0, REFERENCE)
from evalmetry import debug  # noqa: E402

PTX = os.path.join(os.path.dirname(EVMBPF), "agent", "stats_kernels.ptx")
PTXAS = "/usr/local/cuda/bin/ptxas"
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
    return subprocess.run([TEST_AIDS, "cupti-replay"], input=text, capture_output=True,
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
                    "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "agent"),
                    "-I" + inc, "-DEVM_PTX_FILE=\"%s\"" % PTX,
                    os.path.join(ROOT, "agent", "agent.c"), os.path.join(ROOT, "agent", "numeric.c"),
                    "-ldl", "-lpthread", "-o", str(out)],
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

@pytest.mark.root
@need_agent
def test_cpu_job_with_cupti_is_traced_as_without_it(tmp_path, plain_runs):
    plain, with_cupti = plain_runs["inject"], str(tmp_path / "cupti.jsonl")
    b = run_launch(INJECT, with_cupti, evmbpf_args=["--cupti"])
    assert b.returncode == 0, b.stderr
    compare_traces(load(plain), load(with_cupti))
    assert "--cupti: the command never initialised CUDA" in b.stderr
    assert b.stderr.count("--cupti") == 1
    assert not [e for e in load(with_cupti) if e["event"].startswith("gpu")]
    assert "cupti" not in load(with_cupti)[0]["tracer"]   # no agent ran: no libcupti to name


@pytest.mark.root
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


@pytest.mark.root
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


def test_the_agents_own_kernels_are_counted_apart():
    """--numeric's reductions, launched from the agent's thread, are neither a module
    call's nor unattributed job work: gpu_summary's numeric_* count them."""
    got = replay("agent 77\nenter 1 1 <root> 0\napi 1 5 10\napi 77 6 11\nexit 1 1 100\n"
                 "kernel 5 0 40\nkernel 6 50 53\n")
    assert got.returncode == 0, got.stderr
    summary = events_of(got.stdout)[-1]
    assert (summary["kernels"], summary["gpu_ns"], summary["unattributed_kernels"]) == (1, 40, 0)
    assert (summary["numeric_kernels"], summary["numeric_gpu_ns"]) == (1, 3)


def test_replay_rejects_a_bad_line():
    got = replay("enter 1 1 <root> 0\nkernel x\n")
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == ["evmbpf: cupti-replay: line 2: cannot read 'kernel x'"]


# ---- the trace extension and the readers ----

@pytest.mark.root
def test_reference_reader_reads_a_trace_with_gpu_events(tmp_path, plain_runs):
    """A real trace, its module calls replayed with one kernel launched in each, and the
    gpu events appended as the collector writes them."""
    path = str(tmp_path / "t.jsonl")
    with open(plain_runs["inject"]) as src, open(path, "w") as dst:
        # the closing line of a trace written where breakpoints never fire: a mark the
        # reference reader would count as an event (test_readers' check_all_commands
        # compares marked traces)
        dst.write("".join(ln for ln in src if '"event": "unobservable"' not in ln))
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
    mine = text
    if load(path)[0].get("tracer", {}).get("watch", {}).get("note_samples") == "not observable":
        # written where breakpoints never fire: evmbpf's readers say so (test_machines.py)
        mine = text.replace("none recorded (a batch-size probe, or a document already on "
                            "disk)", "not observable on this machine")
    assert ours.stdout == mine.replace("  evalmetry debug ", "  evmbpf show ") + "\n"
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


# ---- --numeric: the device's statistics ----

def test_kernels_ptx_is_accepted_by_ptxas_and_embedded_in_the_agent(tmp_path):
    """clang's NVPTX backend made the PTX at build time (no nvcc); ptxas compiles it for
    the GPU machine's H200 (sm_90) and for the oldest target it names (sm_75 here: CUDA
    13's ptxas has no sm_70)."""
    with open(PTX) as handle:
        ptx = handle.read()
    entries = [line.split()[2].split("(")[0] for line in ptx.splitlines()
               if line.startswith(".visible .entry")]
    assert entries == ["evm_k_partial", "evm_k_merge1", "evm_k_merge2", "evm_k_hist",
                       "evm_k_select", "evm_k_finish"]
    assert ".target sm_70" in ptx and "fma" not in ptx   # no contraction: the host's order
    # struct evm_job by value, as the agent's host build lays it out (a _Static_assert there)
    assert ptx.count(".param .align 8 .b8 ") == 6 and ptx.count("_param_0[328]") == 6
    if os.path.exists(AGENT):
        with open(AGENT, "rb") as handle:
            assert ptx.encode() + b"\0" in handle.read()
    if not os.path.exists(PTXAS):
        pytest.skip("no %s here: the PTX was not compiled by ptxas" % PTXAS)
    for arch in ("sm_90", "sm_75"):
        got = subprocess.run([PTXAS, "-arch=" + arch, PTX, "-o", str(tmp_path / (arch + ".cubin"))],
                             capture_output=True, text=True)
        assert got.returncode == 0, (arch, got.stderr)


def _storage_bytes(base):
    import torch
    return base.contiguous().view(torch.uint8).numpy().tobytes()


def _stats_cases():
    """(name, base 1-D tensor, sizes, strides, offset): views of every dtype the CPU path
    takes, strided, with NaN/Inf, across the kernels' worker and group boundaries."""
    import torch
    g = torch.Generator().manual_seed(0)
    cases = []

    def rand(n, dtype):
        if dtype == torch.bool:
            return torch.rand(n, generator=g) > 0.5
        if not dtype.is_floating_point:
            info = torch.iinfo(dtype)
            lo, hi = max(info.min, -2 ** 40), min(info.max, 2 ** 40)
            return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)
        x = torch.randn(n, generator=g, dtype=torch.float64) * 50 + 3
        x[::37] = float("nan")
        x[5::101] = float("inf")
        x[7::211] = float("-inf")
        return x.to(dtype)

    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8,
              torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]
    for dt in dtypes:
        base = rand(6007, dt)
        cases.append((str(dt) + " contiguous", base, [6007], [1], 0))
        cases.append((str(dt) + " transposed slice", base, [40, 70], [1, 80], 13))
        cases.append((str(dt) + " stepped 3-d", base, [5, 7, 11], [1100, 150, 9], 2))
    big = rand(1200013, torch.float32)             # more elements than workers x 64
    cases.append(("float32 1.2M", big, [1200013], [1], 0))
    cases.append(("float64 even, zeros", torch.tensor([4.0, -1.0, 2.5, 2.5, 0.0, -0.0]), [6], [1], 0))
    cases.append(("no finite", torch.tensor([float("nan"), float("inf"), float("-inf")]), [3], [1], 0))
    cases.append(("one value", torch.tensor([7.25], dtype=torch.float32), [1], [1], 0))
    cases.append(("constant", torch.full((9000,), -2.5), [9000], [1], 0))
    cases.append(("int64 past 2^24", torch.tensor([2 ** 24 + 1, -(2 ** 30) - 3, 5, 2 ** 62 + 3]), [4], [1], 0))
    cases.append(("empty", torch.zeros(4), [0, 3], [3, 1], 0))
    return cases


def _same_stats(ours, want, name):
    import math
    assert set(ours) == set(want), (name, ours, want)
    for key, value in want.items():
        if key in ("mean", "std") and value:
            assert math.isclose(ours[key], value, rel_tol=1e-9, abs_tol=0), (name, key, ours[key], value)
        elif key in ("mean", "std"):
            assert abs(ours[key]) < 1e-12, (name, key, ours[key])
        else:
            assert ours[key] == value, (name, key, ours[key], value)


def test_device_kernels_built_for_the_host_match_the_reference_tracer():
    """agent/stats_kernels.h compiled as plain C (`evmbpf-test-aids cupti-stats` runs the
    kernels' bodies in the device's order) against the reference's _tensor_stats: counts,
    min, max and median equal, mean and std within 1e-9 relative."""
    import torch
    dtype_codes = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
                   torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.bool: 11,
                   torch.bfloat16: 15}
    for name, base, sizes, strides, offset in _stats_cases():
        view = base.as_strided(sizes, strides, offset)
        want = debug._tensor_stats(view)
        head = "%d %d %d %s %s\n" % (dtype_codes[base.dtype], offset, len(sizes),
                                     " ".join(map(str, sizes)), " ".join(map(str, strides)))
        got = subprocess.run([TEST_AIDS, "cupti-stats"], input=head.encode() + _storage_bytes(base),
                             capture_output=True, timeout=120)
        assert got.returncode == 0, got.stderr
        _same_stats(json.loads(got.stdout), want, name)


def test_cupti_stats_rejects_a_bad_header():
    got = subprocess.run([TEST_AIDS, "cupti-stats"], input=b"6 0 2 3\n", capture_output=True)
    assert got.returncode == 2
    assert got.stderr.decode().count("\n") == 1 and "DTYPE OFFSET NDIM" in got.stderr.decode()


# ---- --numeric: the channel collector -> agent -> ring, without a device ----

def _cupti_inc():
    for inc in ("/usr/local/cuda/include",
                subprocess.run([os.path.join(ROOT, "scripts", "cupti-headers.sh"), "path"],
                               capture_output=True, text=True).stdout.strip()):
        if inc and os.path.exists(os.path.join(inc, "cupti.h")) and \
                os.path.exists(os.path.join(inc, "cuda.h")):
            return inc
    return None


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """tests/cupti/: the stand-in libcuda/libcupti and the agent's host process."""
    if not os.path.exists(AGENT):
        pytest.skip("no CUPTI headers: the agent was not built")
    inc = _cupti_inc()
    if not inc:
        pytest.skip("no cupti.h and cuda.h for the stand-in libcuda")
    d = tmp_path_factory.mktemp("standin")
    lib, host = str(d / "libfakecuda.so"), str(d / "agent_host")
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                    "-ffp-contract=off", "-I" + os.path.join(ROOT, "include"),
                    "-I" + os.path.join(ROOT, "agent"), "-I" + inc,
                    os.path.join(ROOT, "tests", "cupti", "fake_cuda.c"), "-o", lib, "-lm"],
                   check=True, capture_output=True, text=True)
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", os.path.join(ROOT, "tests", "cupti", "agent_host.c"),
                    "-o", host, "-ldl"], check=True, capture_output=True, text=True)
    return {"lib": lib, "host": host, "dir": d}


def channel(stand_in, cases, lines, env=(), timeout=120):
    files = []
    for n, (name, base, sizes, strides, offset) in enumerate(cases):
        path = str(stand_in["dir"] / ("storage%d.bin" % n))
        with open(path, "wb") as handle:
            handle.write(_storage_bytes(base) or b"\0")
        files.append(path)
    e = dict(os.environ, EVMBPF_CUPTI_LIB=stand_in["lib"], EVMBPF_CUDA_LIB=stand_in["lib"], **dict(env))
    e.pop("CUDA_INJECTION64_PATH", None)
    return subprocess.run([TEST_AIDS, "cupti-channel", stand_in["host"], *files],
                          input="".join(line + "\n" for line in lines), capture_output=True,
                          text=True, env=e, timeout=timeout)


def _tensor_line(n, case, dtype_codes, exit_=False):
    name, base, sizes, strides, offset = case
    return "tensor %d %d %d %d %s %s%s" % (n, dtype_codes[base.dtype], offset, len(sizes),
                                          " ".join(map(str, sizes)), " ".join(map(str, strides)),
                                          " exit" if exit_ else "")


def _codes():
    import torch
    return {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
            torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.bool: 11,
            torch.bfloat16: 15}


def test_channel_gives_every_tensor_the_reference_stats_in_order(stand_in, tmp_path):
    """The collector's code posts each tensor into the memfd and waits for the agent's
    acknowledgement; the agent (the real evmbpf-cupti.so, loaded by a process as the
    driver would) runs the kernels through the stand-in driver, its results come back
    through the ring, and the lines that waited for them are written in order."""
    cases = [c for c in _stats_cases() if "1.2M" not in c[0] and c[0] != "empty"]
    codes = _codes()
    lines = []
    for n, case in enumerate(cases):
        lines.append(_tensor_line(n, case, codes))
        if n % 7 == 3:
            lines.append("drain")
    log = str(tmp_path / "launches.log")
    got = channel(stand_in, cases, lines, env={"FAKE_CUDA_LOG": log})
    assert got.returncode == 0, got.stderr
    assert "warning" not in without_machine_notes(got.stderr), got.stderr
    events = events_of(got.stdout)
    tensors = [e for e in events if e["event"] == "tensor"]
    assert [e["n"] for e in tensors] == list(range(len(cases)))
    assert [e["i"] for e in events] == list(range(1, len(events) + 1))
    for e, (name, base, sizes, strides, offset) in zip(tensors, cases):
        _same_stats(e["stats"], debug._tensor_stats(base.as_strided(sizes, strides, offset)), name)
    # no launch was seen on the harness's thread: every reduction on the legacy stream
    with open(log) as handle:
        launches = [line.split() for line in handle]
    assert launches and {l[2] for l in launches} == {"0x1"}
    floats = sum(1 for c in cases if c[1].is_floating_point())
    assert sum(1 for l in launches if l[0] == "evm_k_finish") == len(cases)
    assert sum(1 for l in launches if l[0] == "evm_k_hist") == 8 * floats
    assert events[-1]["event"] == "gpu_summary"


def test_channel_stop_on_nonfinite_waits_for_an_exits_stats(stand_in):
    import torch
    codes = _codes()
    cases = [("finite", torch.arange(10, dtype=torch.float32), [10], [1], 0),
             ("nan", torch.tensor([1.0, float("nan"), float("inf")]), [3], [1], 0)]
    got = channel(stand_in, cases, [_tensor_line(0, cases[0], codes, True),
                                    _tensor_line(1, cases[1], codes, True)],
                  env={"EVMBPF_TEST_STOP": "1"})
    assert got.returncode == 0, got.stderr
    tensors = [e for e in events_of(got.stdout) if e["event"] == "tensor"]
    assert "nonfinite" not in tensors[0] and tensors[0]["stats"]["max"] == 9.0
    assert tensors[1]["nonfinite"] == "1 NaN, 1 +Inf, 0 -Inf in a [3]"


def test_channel_a_hung_agent_costs_a_bounded_wait_and_one_warning(stand_in):
    """cuLaunchKernel never returns in the agent's thread: the collector stops waiting,
    says so once, and every tensor is written without stats; the harness (the job) exits."""
    import torch
    codes = _codes()
    cases = [("a", torch.arange(10, dtype=torch.float32), [10], [1], 0)] * 3
    got = channel(stand_in, cases, [_tensor_line(n, c, codes) for n, c in enumerate(cases)],
                  env={"FAKE_CUDA_HANG": "1", "EVMBPF_TEST_CUPTI_ACK_MS": "300"})
    assert got.returncode == 0, got.stderr
    tensors = [e for e in events_of(got.stdout) if e["event"] == "tensor"]
    assert len(tensors) == 3 and not [e for e in tensors if "stats" in e]
    warnings = [l for l in got.stderr.splitlines() if "did not take a request in time" in l]
    assert len(warnings) == 1, got.stderr


def test_channel_rejects_a_bad_line(stand_in):
    got = channel(stand_in, [], ["tensor 5 6 0 1 3 1"])
    assert got.returncode == 2
    assert "cupti-channel: cannot read 'tensor 5 6 0 1 3 1'" in got.stderr


# ---- libcupti 12 and 13: one agent, the layouts checked at build time ----

LAYOUT_OK = os.path.join(os.path.dirname(EVMBPF), "agent", "cupti-layout.ok")


def _header_sets():
    """{major: (api, include dir)}: the CUPTI header sets `make agent` checked the
    agent's layout table against (build/agent/cupti-layout.ok)."""
    if not os.path.exists(LAYOUT_OK):
        return {}
    sets = {}
    with open(LAYOUT_OK) as handle:
        for line in handle:
            major, api, inc = line.split()
            sets.setdefault(int(major), (int(api), inc))
    return sets


@need_agent
def test_layout_table_is_checked_against_each_header_set_found(tmp_path):
    """agent/cupti_layout.h's offsets hold for CUDA 12's and 13's headers (both are here:
    Debian's libcupti-dev 12.4 and the CUDA 13.0 toolkit), and an offset off by 4 stops
    the build."""
    sets = _header_sets()
    assert sets, "make agent checked no CUPTI header set"
    if os.path.exists("/usr/local/cuda/include/cupti.h") and _cupti12_inc():
        assert set(sets) == {12, 13}, sets
    src = os.path.join(ROOT, "agent", "cupti_layout.c")
    for major, (api, inc) in sets.items():
        got = subprocess.run(["gcc", "-std=gnu11", "-fsyntax-only", "-I" + os.path.join(ROOT, "agent"),
                              "-I" + inc, src], capture_output=True, text=True)
        assert got.returncode == 0, (major, got.stderr)
        with open(os.path.join(ROOT, "agent", "cupti_layout.h")) as handle:
            table = handle.read()
        bad = tmp_path / "cupti_layout.h"
        bad.write_text(table.replace("EVM_LAYOUT(T, streamId, 48, 4)", "EVM_LAYOUT(T, streamId, 44, 4)"))
        (tmp_path / "cupti_layout.c").write_text('#include "cupti_layout.h"\n')
        got = subprocess.run(["gcc", "-std=gnu11", "-fsyntax-only", "-I" + inc,
                              str(tmp_path / "cupti_layout.c")], capture_output=True, text=True)
        assert got.returncode != 0 and "streamId is not at +44" in got.stderr, (major, got.stderr)


def _cupti12_inc():
    inc = subprocess.run([os.path.join(ROOT, "scripts", "cupti-headers.sh"), "path"],
                         capture_output=True, text=True).stdout.strip()
    return inc if os.path.exists(os.path.join(inc, "cupti.h")) else None


@pytest.fixture(scope="module")
def majors(tmp_path_factory, stand_in):
    """A stand-in libcupti per CUDA major whose headers are here, each built against its
    own major's headers: it reports that CUPTI API version and hands out that
    generation's records."""
    d = tmp_path_factory.mktemp("majors")
    libs = {}
    for major, (api, inc) in _header_sets().items():
        lib = str(d / ("libfakecupti%d.so" % major))
        subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden",
                        "-ffp-contract=off", "-I" + os.path.join(ROOT, "include"),
                        "-I" + os.path.join(ROOT, "agent"), "-I" + inc,
                        os.path.join(ROOT, "tests", "cupti", "fake_cuda.c"), "-o", lib, "-lm"],
                       check=True, capture_output=True, text=True)
        libs[major] = (lib, api)
    return libs


def warnings_of(err):
    """stderr's lines but for what -v says"""
    return [line for line in err.splitlines() if "warning" in line or "without GPU activity" in line]


def agent_run(stand_in, env, work=0):
    """The agent loaded by the channel's harness (no tensors), the harness's stand-in
    GPU work seen by CUPTI, the session's end written: (stdout events, stderr)."""
    e = dict(os.environ, EVMBPF_CUDA_LIB=stand_in["lib"], AGENT_HOST_WORK=str(work), **env)
    for key in ("CUDA_INJECTION64_PATH", "EVMBPF_CUPTI_LIB", "FAKE_CUPTI_VERSION"):
        if key not in env:
            e.pop(key, None)
    got = subprocess.run([TEST_AIDS, "cupti-channel", "-v", stand_in["host"]], input="", capture_output=True,
                         text=True, env=e, timeout=120)
    assert got.returncode == 0, got.stderr
    return events_of(got.stdout), got.stderr


@need_agent
@pytest.mark.parametrize("major", [12, 13])
def test_agent_reads_the_records_of_each_cupti_major(stand_in, majors, major):
    """One agent (built against one header set) with a libcupti of CUDA 12 and of CUDA
    13: their callbacks and their own generation's records (kernels, a copy, a set,
    device memory, a pool) come through the ring into gpu_summary and gpu_mem, and
    gpu_summary says which libcupti it was."""
    if major not in majors:
        pytest.skip("no CUDA %d CUPTI headers here" % major)
    lib, api = majors[major]
    events, err = agent_run(stand_in, {"EVMBPF_CUPTI_LIB": lib}, work=3)
    assert not warnings_of(err), err
    summary = events[-1]
    assert summary["event"] == "gpu_summary"
    assert (summary["kernels"], summary["gpu_ns"], summary["unattributed_kernels"]) == (3, 6000, 3)
    assert (summary["memcpy"], summary["memcpy_bytes"], summary["memcpy_ns"]) == (1, 4096, 50)
    assert (summary["memset"], summary["memset_bytes"], summary["mem_events"]) == (1, 128, 3)
    assert summary["cupti"] == {"lib": lib, "how": "EVMBPF_CUPTI_LIB", "version": api, "cuda": major}
    mem = [(e["op"], e["address"], e["bytes"], e["device"]) for e in events if e["event"] == "gpu_mem"]
    assert mem == [("alloc", 0x7f0000200000, 2 << 20, 1), ("free", 0x7f0000200000, 2 << 20, 1),
                   ("pool_created", 0x7f0000400000, 1 << 20, 1)]
    assert "with %s (EVMBPF_CUPTI_LIB; CUPTI API %d, CUDA %d;" % (lib, api, major) in err, err


@need_agent
@pytest.mark.parametrize("api,major", [(17, 11), (140000, 14)])
def test_agent_gives_up_on_a_cupti_of_another_major(stand_in, api, major):
    events, err = agent_run(stand_in, {"EVMBPF_CUPTI_LIB": stand_in["lib"], "FAKE_CUPTI_VERSION": str(api)},
                            work=2)
    warnings = warnings_of(err)
    assert len(warnings) == 1, err
    assert "CUPTI API version %d (CUDA %d)" % (api, major) in warnings[0]
    assert "CUDA 12 to 13's CUPTI only" in warnings[0] and stand_in["lib"] in warnings[0]
    assert not [e for e in events if e["event"].startswith("gpu")]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory, majors):
    """A site-packages with both wheels' layouts: nvidia/cuda_cupti/lib/libcupti.so.12
    (CUDA 12's) beside nvidia/cuda_runtime/lib/libcudart.so.12, and nvidia/cu13/lib with
    libcupti.so.13 and libcudart.so.13 (CUDA 13's); the libcudart are empty libraries."""
    if set(majors) != {12, 13}:
        pytest.skip("needs CUDA 12's and 13's CUPTI headers")
    import shutil
    site = tmp_path_factory.mktemp("wheels") / "site-packages"
    paths = {}
    for sub, name, src in (("cuda_cupti", "libcupti.so.12", majors[12][0]),
                           ("cu13", "libcupti.so.13", majors[13][0]),
                           ("cuda_runtime", "libcudart.so.12", None),
                           ("cu13", "libcudart.so.13", None),
                           ("other", "libother.so", None)):
        d = site / "nvidia" / sub / "lib"
        d.mkdir(parents=True, exist_ok=True)
        path = str(d / name)
        if src:
            shutil.copy(src, path)
        else:
            c = d / (name + ".c")
            c.write_text("int %s_standin;\n" % name.replace(".", "_"))
            subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname," + name, str(c), "-o", path],
                           check=True)
        paths[name] = path
    return paths


@need_agent
@pytest.mark.parametrize("preload,want,how", [
    ("libcupti.so.13", "libcupti.so.13", "mapped"),
    ("libcudart.so.13", "libcupti.so.13", "libcudart.so.13"),
    ("libcudart.so.12", "libcupti.so.12", "libcudart.so.12"),
    ("libother.so", "libcupti.so.12", "search"),
])
def test_which_libcupti_the_agent_opens(stand_in, wheels, preload, want, how):
    """Without EVMBPF_CUPTI_LIB: a libcupti the process has mapped already; else the one
    of the mapped libcudart's major (CUDA 13's wheel, though CUDA 12's comes first in the
    search); else the search of the mapped site-packages. -v, gpu_summary say which."""
    events, err = agent_run(stand_in, {"AGENT_HOST_PRELOAD": wheels[preload]}, work=1)
    summary = events[-1]
    assert summary["event"] == "gpu_summary" and summary["kernels"] == 1, err
    assert (summary["cupti"]["lib"], summary["cupti"]["how"]) == (wheels[want], how), summary
    assert summary["cupti"]["cuda"] == int(want.rsplit(".", 1)[1])
    assert "with %s (%s;" % (wheels[want], how) in err, err


STANDIN_GPU = os.path.join(OWN_WORKLOADS, "cupti_standin.py")


@pytest.mark.root
@need_agent
@pytest.mark.parametrize("major", [12, 13])
def test_trace_header_names_the_libcupti_the_agent_took(tmp_path, stand_in, majors, major):
    """A launched job whose agent runs before its first module call (loaded as the driver
    would, then each leaf module "launches" a kernel through the stand-in libcupti of
    that major): the header's tracer.cupti names the libcupti, how it was chosen, its
    CUPTI API version and CUDA major, as gpu_summary does; the kernels are the modules'."""
    if major not in majors:
        pytest.skip("no CUDA %d CUPTI headers here" % major)
    lib, api = majors[major]
    path = str(tmp_path / "t.jsonl")
    env = dict(os.environ, EVMBPF_TEST_INJECT="1", EVMBPF_CUPTI_LIB=lib, EVMBPF_CUDA_LIB=lib)
    got = run_launch(STANDIN_GPU, path, evmbpf_args=["--cupti"], env=env)
    assert got.returncode == 0, got.stderr
    events = load(path)
    want = {"lib": os.path.realpath(lib), "how": "EVMBPF_CUPTI_LIB", "version": api, "cuda": major}
    assert events[0]["tracer"]["cupti"] == want, events[0]
    summary = [e for e in events if e["event"] == "gpu_summary"]
    assert len(summary) == 1 and summary[0]["cupti"] == want
    assert (summary[0]["kernels"], summary[0]["unattributed_kernels"]) == (6, 0)
    assert "warning" not in without_machine_notes(got.stderr), got.stderr


# ---- --numeric --cupti with launched CPU jobs ----

@pytest.fixture(scope="module")
def numeric_run(tmp_path_factory):
    """The CPU job launched with --numeric alone, once for the module's tests."""
    path = str(tmp_path_factory.mktemp("numeric") / "numeric.jsonl")
    got = run_launch(INJECT, path, evmbpf_args=["--numeric"])
    assert got.returncode == 0, got.stderr
    return path


@pytest.mark.root
@need_agent
def test_cpu_job_with_cupti_numeric_is_traced_as_numeric_alone(tmp_path, numeric_run):
    plain, with_cupti = numeric_run, str(tmp_path / "cupti.jsonl")
    b = run_launch(INJECT, with_cupti, evmbpf_args=["--cupti", "--numeric"])
    assert b.returncode == 0, b.stderr
    compare_traces(load(plain), load(with_cupti))
    assert [e.get("args") for e in load(plain) if e["event"] == "input_numeric"] == \
        [e.get("args") for e in load(with_cupti) if e["event"] == "input_numeric"]
    assert "--cupti: the command never initialised CUDA" in b.stderr
    assert b.stderr.count("--cupti") == 1, b.stderr


FAKE_CUDA = os.path.join(OWN_WORKLOADS, "cupti_fake_cuda.py")


@pytest.mark.root
@need_agent
def test_numeric_cupti_end_to_end_with_tensors_that_read_as_cuda(tmp_path, stand_in):
    """A real Python (torch 1.13), real probes, the real hold: tensors whose device bytes
    say cuda:0 (the workload retags CPU tensors of its own; nothing operates on them),
    the agent in the target with the stand-in libcuda (its "device memory" is the
    target's memory). Every such tensor in input_numeric, exit and unwound gets the
    reference's stats of its values; the lines waited for them in order."""
    path = str(tmp_path / "t.jsonl")
    # the agent's acknowledgement waited for as long as a loaded machine needs (by
    # default 5 s, then CUDA tensors go without stats, with a warning)
    env = dict(os.environ, EVMBPF_TEST_INJECT="1", EVMBPF_CUPTI_LIB=stand_in["lib"],
               EVMBPF_CUDA_LIB=stand_in["lib"], FAKE_CUDA_LOG=str(tmp_path / "launches.log"),
               EVMBPF_TEST_CUPTI_ACK_MS="120000")
    got = run_launch(FAKE_CUDA, path, evmbpf_args=["--cupti", "--numeric", "-v"], env=env)
    assert got.returncode == 0, got.stderr
    expect = json.loads(next(l for l in got.stdout.splitlines() if l.startswith("EXPECT "))[7:])
    events = load(path)
    assert [e["i"] for e in events] == list(range(1, len(events) + 1))
    names = ["strided", "half", "ints", "view"]
    others = ["view", "view", "view", "half"]
    seen = 0
    first = min(e["forward"] for e in events if e["event"] == "enter")
    for e in events:
        if "forward" in e:
            e = dict(e, forward=e["forward"] - first)
        if e["event"] == "input_numeric" and e["module"] == "sink":
            fwd = e["forward"]
            fake = e["args"][1]
            assert fake["device"] == "cuda:0", fake
            _same_stats(fake["stats"], expect[names[fwd]], names[fwd])
            seen += 1
        elif e["event"] == "exit" and e["module"] == "sink":
            _same_stats(e["output"]["stats"], expect[names[e["forward"]]], "exit")
            seen += 1
        elif e["event"] == "unwound":
            assert e["module"] == "raiser", e
            _same_stats(e["args"][0]["stats"], expect[others[e["forward"]]], "unwound")
            seen += 1
        elif e["event"] == "input_numeric" and e["module"] == "raiser":
            _same_stats(e["args"][0]["stats"], expect[others[e["forward"]]], "raiser")
            seen += 1
    assert seen == 16, (seen, [e["event"] for e in events])
    assert "warning" not in without_machine_notes(got.stderr), got.stderr
    assert "reduced on the legacy default stream" in got.stderr
    with open(tmp_path / "launches.log") as handle:
        assert sum(1 for line in handle if line.startswith("evm_k_finish")) >= 16


@pytest.mark.root
@need_agent
@pytest.mark.skipif(not FULL_MATRIX, reason="slow: EVMBPF_FULL_MATRIX=1 runs it")
def test_stop_on_nonfinite_cupti_end_to_end(tmp_path, stand_in):
    """--stop-on-nonfinite with a tensor that reads as cuda:0 and holds a NaN: the exit's
    stats are waited for while the thread is held, the trace ends with NonFiniteOutput at
    that module, the target is stopped before its caller runs on."""
    import signal
    path = str(tmp_path / "t.jsonl")
    env = dict(os.environ, EVMBPF_TEST_INJECT="1", EVMBPF_CUPTI_LIB=stand_in["lib"],
               EVMBPF_CUDA_LIB=stand_in["lib"])
    tracer = subprocess.Popen([EVMBPF, "--cupti", "--stop-on-nonfinite", "--out", path, "--",
                               "/usr/bin/python3.11", os.path.join(REFERENCE, "run_workload.py"),
                               FAKE_CUDA], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    said = ""
    for line in tracer.stderr:
        said += line
        if "kill -CONT" in line:
            break
    pid = int(said.rsplit("kill -CONT ", 1)[1].split()[0])
    assert proc_state(pid) == "T"
    events = load(path)
    error = [e for e in events if e["event"] == "error"]
    os.kill(pid, signal.SIGCONT)
    stdout, _ = tracer.communicate(timeout=120)
    assert tracer.returncode == 3
    expect = json.loads(next(l for l in stdout.splitlines() if l.startswith("EXPECT "))[7:])
    want = expect["strided"]
    assert len(error) == 1 and error[0]["exc_type"] == "NonFiniteOutput"
    assert error[0]["message"] == ("sink produced a non-finite output: %d NaN, %d +Inf, %d -Inf "
                                   "in a [30, 40] float32 tensor"
                                   % (want["nan"], want["posinf"], want["neginf"]))
