"""evmbpf against the reference in-process tracer, on real CPython + real PyTorch.

Every workload is traced three ways: by the reference (hooks in-process), by evmbpf
launching it, and by evmbpf attaching to it by pid. The traces must agree event for
event on the keys the issue names."""
import glob
import os
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, REFERENCE,
                            Attached, compare_traces, link_types, links_on, load, multi_links,
                            perf_links, run_launch, run_reference, host_kwargs, use_links,
                            wait_for_line)

pytestmark = pytest.mark.root

WORKLOADS = sorted(glob.glob(os.path.join(REF_WORKLOADS, "*.py"))) + \
    sorted(glob.glob(os.path.join(OWN_WORKLOADS, "odd_values.py")))
# phases are rebuilt from markers: see test_phases.py
PHASE_AWARE = set()  # phases are rebuilt from markers and compared too
KWARGS = host_kwargs()


def ids(paths):
    return [os.path.basename(p)[:-3] for p in paths]


@pytest.fixture(scope="module")
def reference_traces(tmp_path_factory):
    out = {}
    base = tmp_path_factory.mktemp("ref")
    for workload in WORKLOADS:
        path = str(base / (os.path.basename(workload) + ".jsonl"))
        run_reference(workload, path)
        out[workload] = load(path)
    return out


@pytest.mark.parametrize("workload", WORKLOADS, ids=ids(WORKLOADS))
def test_launch_matches_reference(evmbpf, workload, reference_traces, tmp_path):
    out = str(tmp_path / "trace.jsonl")
    plain = subprocess.run([HOST_PYTHON, os.path.join(REFERENCE, "run_workload.py"), workload],
                           capture_output=True, text=True)
    result = run_launch(workload, out)
    assert result.returncode == plain.returncode, result.stderr
    assert "attached to" in result.stderr
    compare_traces(reference_traces[workload], load(out), kwargs=KWARGS,
                   phase=os.path.basename(workload) not in PHASE_AWARE)


@pytest.mark.parametrize("workload", WORKLOADS, ids=ids(WORKLOADS))
def test_pid_matches_reference(evmbpf, workload, reference_traces, tmp_path):
    out = str(tmp_path / "trace.jsonl")
    run = Attached(workload, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(reference_traces[workload], load(out), kwargs=KWARGS,
                   phase=os.path.basename(workload) not in PHASE_AWARE)


@pytest.mark.parametrize("mode", ["launch", "pid"])
def test_perf_uprobes_match_reference(evmbpf, mode, reference_traces, tmp_path, monkeypatch):
    """Kernels before 6.6 have no uprobe_multi links: evmbpf makes each probe a perf event
    uprobe there, made by its link server (session/linkserver.c). Made so on this kernel
    (EVMBPF_NO_UPROBE_MULTI=1), the trace is the reference's; evmbpf holds perf uprobes
    and no uprobe_multi link while it traces; none is left on the target after."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    out = str(tmp_path / "trace.jsonl")
    use_links(monkeypatch, "perf")
    if mode == "launch":
        result = run_launch(workload, out)
        assert result.returncode == 0, result.stderr
    else:
        run = Attached(workload, out)
        held = link_types(run.tracer.pid)
        multi = multi_links(run.tracer.pid)
        events = {p.get("fd_type") for p in perf_links(run.tracer.pid)}
        run.release()
        run.finish()
        assert run.tracer_rc == 0, run.tracer_err
        # the calls' uprobe and uretprobe, the exception's and the dlopen's at least
        assert held.count("perf") >= 4 and not multi, (held, multi)
        # and their events, which bpftool perf list shows by their holder
        assert {"uprobe", "uretprobe"} <= events, events
        assert not links_on([run.pid]), links_on([run.pid])
    compare_traces(reference_traces[workload], load(out), kwargs=KWARGS)


def test_pid_given_twice_is_traced_once(evmbpf, reference_traces, tmp_path):
    """`--pid P,P --pid P`: one session, said once per repeat. Two would probe every call
    twice (each record written twice) and race for the one output file; before, the
    second refused the file the first had made and evmbpf ended with no trace."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    out = str(tmp_path / "trace.jsonl")
    run = Attached(workload, out,
                   pid_args=lambda pid: ["--pid", f"{pid},{pid}", "--pid", str(pid)])
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    assert run.tracer_err.count(f"--pid {run.pid} is given more than once") == 2, \
        run.tracer_err
    assert run.tracer_err.count("attached to") == 1, run.tracer_err
    compare_traces(reference_traces[workload], load(out), kwargs=KWARGS)


def test_header_and_extensions(evmbpf, tmp_path):
    out = str(tmp_path / "t.jsonl")
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    result = run_launch(workload, out)
    assert result.returncode == 0, result.stderr
    events = load(out)
    header = events[0]
    assert header["event"] == "header" and header["trace_schema_version"] == "1.1"
    torch_version = subprocess.run([HOST_PYTHON, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    assert header["torch"] == torch_version
    assert header["tracer"]["name"] == "evmbpf"
    assert list(header)[:8] == ["event", "trace_schema_version", "created", "config",
                                "model_type", "torch", "cuda", "i"]
    modules = [e for e in events if e["event"] in ("enter", "exit")]
    assert modules and all(isinstance(e["tid"], int) and e["ts_ns"] > 0 for e in modules)
    stamps = [e["ts_ns"] for e in modules]
    assert stamps == sorted(stamps)
    # key order of the reference
    enter = next(e for e in events if e["event"] == "enter")
    assert list(enter)[:11] == ["event", "module", "type", "depth", "phase", "forward", "call",
                                "args", "kwargs", "mem", "i"]
    # floats read back as floats
    text = open(out).read()
    assert '"value": 0.125' in text or "0.125" in text


def test_stats_count_the_records_and_their_bytes(evmbpf, tmp_path):
    """--stats (what the benchmarks read): the records the ring buffer handed over, and
    their bytes, which cost-breakdown.py divides by the module calls."""
    import json
    out, stats = str(tmp_path / "t.jsonl"), str(tmp_path / "stats.json")
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    result = run_launch(workload, out, evmbpf_args=["--stats", stats])
    assert result.returncode == 0, result.stderr
    with open(stats) as handle:
        counters = json.load(handle)
    calls = [e for e in load(out) if e["event"] in ("enter", "exit")]
    # one record a module event at least (plus the stack, task and type records)
    assert counters["records"] >= len(calls) > 0, counters
    # a call record is a header, self, sp, flags and marker (56 bytes) and its nodes
    # (24 bytes and more each, one at least for args and one for the output)
    assert 80 * len(calls) <= counters["record_bytes"] <= 8192 * counters["records"], counters


def test_reference_reader_reads_evmbpf_traces(evmbpf, tmp_path):
    import sys
    sys.path.insert(0, REFERENCE)
    from evalmetry.debug import describe_forward, read_trace, summarize_trace
    for workload in WORKLOADS:
        out = str(tmp_path / (os.path.basename(workload) + ".jsonl"))
        run_launch(workload, out)
        events = read_trace(out)
        assert summarize_trace(out)
        forwards = {e["forward"] for e in events if e.get("event") == "forward"}
        for number in forwards:
            assert describe_forward(events, number)


def test_modules_filter_matches_reference(evmbpf, tmp_path):
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    run_reference(workload, ref, extra=["--modules", r"layers\.[0-9]+\.attn$"])
    result = run_launch(workload, got, evmbpf_args=["--modules", r"layers\.[0-9]+\.attn$"])
    assert result.returncode == 0, result.stderr
    compare_traces(load(ref), load(got), kwargs=KWARGS)


def test_tail_matches_reference(evmbpf, tmp_path):
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    run_reference(workload, ref, extra=["--tail", "25"])
    result = run_launch(workload, got, evmbpf_args=["--tail", "25"])
    assert result.returncode == 0, result.stderr
    a, b = load(ref), load(got)
    assert a[-1]["event"] == b[-1]["event"] == "dropped"
    assert a[-1]["count"] == b[-1]["count"] and a[-1]["i"] == b[-1]["i"]
    compare_traces(a[:-1], b[:-1], kwargs=KWARGS)


def test_torch_imported_after_attach(evmbpf, tmp_path):
    """A Python process that has not imported torch yet is traced once it does."""
    script = tmp_path / "late.py"
    go = tmp_path / "go"
    script.write_text(
        "import os, sys, time\n"
        "print('ready', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "import torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
        "with torch.no_grad(): m(torch.ones(1, 2))\n")
    target = subprocess.Popen([HOST_PYTHON, str(script)], stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    out = str(tmp_path / "t.jsonl")
    tracer = subprocess.Popen([EVMBPF, "--pid", str(target.pid), "--out", out],
                              stderr=subprocess.PIPE, text=True)
    line = tracer.stderr.readline()
    assert "torch not imported yet" in line, line
    go.write_text("")
    assert target.wait(timeout=120) == 0
    tracer.wait(timeout=30)
    events = load(out)
    assert [e["module"] for e in events if e["event"] == "enter"] == ["<root>", "0"]
    assert events[0]["torch"]


# (event, module, type, depth, forward, call, orphan) of what follows the attach
MIDFORWARD_START = [
    # the pausing layer returns after the attach: an orphan exit, its output never seen
    ("exit", "layers.1", None, 0, 0, None, True),
    ("enter", "layers.2", "Linear", 0, 0, 1, None), ("exit", "layers.2", "Linear", 0, 0, 1, None),
    ("enter", "layers.3", "ReLU", 0, 0, 2, None), ("exit", "layers.3", "ReLU", 0, 0, 2, None),
    ("enter", "head", "Linear", 0, 0, 3, None), ("exit", "head", "Linear", 0, 0, 3, None),
    ("exit", "<root>", None, 0, 0, None, True)]


def test_attach_in_the_middle_of_a_forward(evmbpf, tmp_path):
    """Attached while a forward runs: the model is found on the Python stack, the modules
    still to come in that forward keep their names (forward 0, as hooks registered then
    would see them), the modules running at the attach end with `orphan` exits, and the
    next forwards are whole."""
    workload = os.path.join(OWN_WORKLOADS, "midforward.py")
    flag = tmp_path / "paused"
    resume = tmp_path / "resume"
    # paused until evmbpf says it is attached (60 s at most), however long loading takes
    env = dict(os.environ, MIDFORWARD_FLAG=str(flag), MIDFORWARD_RESUME=str(resume),
               MIDFORWARD_PAUSE="60")
    target = subprocess.Popen([HOST_PYTHON, os.path.join(REFERENCE, "run_workload.py"), workload],
                              env=env)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert time.monotonic() < deadline and target.poll() is None
        time.sleep(0.01)
    out = str(tmp_path / "t.jsonl")
    tracer = subprocess.Popen([EVMBPF, "--pid", str(target.pid), "--out", out],
                              stderr=subprocess.PIPE, text=True)
    wait_for_line(tracer.stderr, "attached to", 60)
    resume.touch()
    assert target.wait(timeout=120) == 0
    assert tracer.wait(timeout=60) == 0, tracer.stderr.read()
    events = [e for e in load(out) if e["event"] != "header"]
    first = [(e["event"], e["module"], e["type"], e["depth"], e["forward"], e["call"],
              e.get("orphan")) for e in events[:8]]
    assert first == MIDFORWARD_START
    assert [e["output"] for e in events[:8] if e.get("orphan")] == [None, None]
    ref = str(tmp_path / "ref.jsonl")
    run_reference(workload, ref, env=dict(os.environ, MIDFORWARD_PAUSE="0"))
    whole = [e for e in load(ref) if e.get("forward", 0) >= 2 and e["event"] != "header"]
    ours = [dict(e, forward=e["forward"] + 1, call=None) for e in events[8:]]
    whole = [dict(e, call=None) for e in whole]
    compare_traces(whole, ours, kwargs=KWARGS)


def test_header_model_type_matches_reference(evmbpf, tmp_path):
    workload = os.path.join(OWN_WORKLOADS, "odd_values.py")
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    run_reference(workload, ref)
    assert run_launch(workload, got).returncode == 0
    assert load(ref)[0]["model_type"] == "odd"
    assert load(got)[0]["model_type"] == "odd"
    # no config: null, as the reference writes it
    tiny = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    assert run_launch(tiny, got + "2").returncode == 0
    assert load(got + "2")[0]["model_type"] is None
