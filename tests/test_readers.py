"""Golden tests of `evmbpf summarize | show | forwards` against the reference reader.

The reference is ../shared/reference/evalmetry/debug.py, run in this process: its
reader functions need no torch. Every trace is read by both and the outputs must be
equal byte for byte, except that the reference's suggestion `evalmetry debug PATH`
reads `evmbpf show PATH` in evmbpf.

Traces: the hand-made edge cases in tests/readers/corpus/ (see make_corpus.py), and
traces the reference tracer writes for the workloads in ../shared/reference/workloads
(made at test time; they need a Python with torch, and are skipped without one).
Then the robustness the reference does not have: cut-off and corrupt lines, empty and
missing files, run directories, mutated traces, and a short libFuzzer run.
"""
import copy
import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from evmbpf_testlib import (EVMBPF, FUZZ_BUILD, REF_WORKLOADS, REFERENCE, ROOT, own_rss,
                            peak_rss_kb, run_evmbpf, run_launch, run_reference)

ASAN_BIN = os.path.join(FUZZ_BUILD, "readers_asan")
FUZZER = os.path.join(FUZZ_BUILD, "fuzz_readers")
CORPUS = os.path.join(ROOT, "tests", "readers", "corpus")
CRASHERS = os.path.join(ROOT, "tests", "fuzz", "corpus")

if not os.path.isdir(REFERENCE):
    pytest.skip(f"the reference reader is not at {REFERENCE}", allow_module_level=True)
sys.path.insert(0, REFERENCE)
from evalmetry import debug  # noqa: E402

from reader_compare import (check_all_commands, reference_index_json,  # noqa: E402
                             reference_show, reference_summary)

pytestmark = pytest.mark.usefixtures("evmbpf")   # conftest's: fails when it is not built

CORPUS_TRACES = sorted(f for f in os.listdir(CORPUS) if f.endswith(".jsonl"))

# (name, workload, run_workload.py options)
WORKLOADS = [
    ("tiny", "tiny_transformer.py", []),
    ("tiny-numeric", "tiny_transformer.py", ["--numeric"]),
    ("tiny-tail", "tiny_transformer.py", ["--tail", "70", "--numeric"]),
    ("tiny-modules", "tiny_transformer.py", ["--modules", r"layers\.\d+\.(attn|mlp)$"]),
    ("raises", "raises.py", []),
    ("raises-numeric", "raises.py", ["--numeric"]),
    ("raises-tail", "raises.py", ["--tail", "15", "--numeric"]),
    ("phases", "phases.py", ["--phase", "loglikelihood"]),
    ("reentry", "reentry.py", ["--numeric"]),
]

# ---- golden: the hand-made corpus ----

@pytest.mark.parametrize("name", CORPUS_TRACES)
def test_corpus_matches_reference(name):
    check_all_commands(os.path.join(CORPUS, name))


@pytest.mark.parametrize("name", ["kv_cache.jsonl", "tail_failed.jsonl", "unicode_names.jsonl"])
def test_lines_split_across_reads(name):
    """Seven-byte reads: every line and every multi-byte character spans reads."""
    env = dict(os.environ, EVMBPF_READ_CHUNK="7")
    check_all_commands(os.path.join(CORPUS, name), env=env)


# ---- golden: traces the reference tracer writes ----

def torch_python():
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if candidate and subprocess.run([candidate, "-c", "import torch"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="session")
def workload_traces(tmp_path_factory):
    python = torch_python()
    if python is None:
        pytest.skip("no Python with torch to run the reference tracer")
    out = tmp_path_factory.mktemp("workloads")
    made = {}
    for name, workload, options in WORKLOADS:
        trace = str(out / f"{name}.jsonl")
        run_reference(os.path.join(REF_WORKLOADS, workload), trace, python=python,
                      extra=options)
        made[name] = trace
    return made


@pytest.mark.parametrize("name", [w[0] for w in WORKLOADS])
def test_workload_trace_matches_reference(workload_traces, name):
    path = workload_traces[name]
    assert os.path.exists(path), f"the reference tracer wrote no {name} trace"
    check_all_commands(path)


def test_forwards_text_lists_every_forward():
    path = os.path.join(CORPUS, "many_forwards.jsonl")
    got = run_evmbpf("forwards", path)
    index = debug.forward_index(debug.read_trace(path))
    lines = got.stdout.splitlines()
    assert got.returncode == 0 and len(lines) == len(index) == 25
    assert lines[0].startswith("forward 1 ") and " modules   " in lines[0]
    assert lines[-1].split()[1] == "25"


# ---- damaged traces ----

def write(path, text):
    with open(path, "w", newline="") as handle:
        handle.write(text)
    return str(path)


def corpus_lines(name):
    with open(os.path.join(CORPUS, name)) as handle:
        return handle.read().splitlines(keepends=True)


def test_cut_off_last_line_is_skipped(tmp_path):
    lines = corpus_lines("error_mem.jsonl")
    whole = write(tmp_path / "whole.jsonl", "".join(lines[:-1]))
    cut = write(tmp_path / "cut.jsonl", "".join(lines[:-1]) + lines[-1][:37])
    got = run_evmbpf("summarize", cut)
    assert got.returncode == 0
    assert got.stdout == reference_summary(whole).replace(whole, cut)
    assert f"cut.jsonl:{len(lines)}:" in got.stderr and "cut off" in got.stderr


def test_corrupt_middle_line_is_reported_and_skipped(tmp_path):
    lines = corpus_lines("kv_cache.jsonl")
    clean = write(tmp_path / "clean.jsonl", "".join(lines[:4] + lines[5:]))
    bad = write(tmp_path / "bad.jsonl", "".join(lines[:4] + ['{"event": "enter", oops\n'] + lines[5:]))
    for args in (["summarize"], ["forwards", "--json"]):
        got = run_evmbpf(args[0], bad, *args[1:])
        assert got.returncode == 0
        assert "bad.jsonl:5:" in got.stderr and "corrupt line" in got.stderr
    got = run_evmbpf("show", bad, "--forward", "1")
    assert got.stdout == reference_show(clean, 1)


def test_many_corrupt_lines_are_counted_not_listed(tmp_path):
    """A file of mostly garbage: the first few bad lines are named, the rest counted in
    one line, and the good lines between them read as the reference reads them alone."""
    lines = corpus_lines("tail_failed.jsonl")
    clean = write(tmp_path / "clean.jsonl", "".join(lines))
    rng = random.Random(7)
    mixed, bad_numbers = [], []
    for line in lines:
        for _ in range(rng.randrange(3000, 6000)):
            mixed.append(rng.choice(["garbage\n", '{"event": "enter", \n', "[1, 2]\n",
                                     '{"a": NaN}\n', "\x00\x01\n"]))
            bad_numbers.append(len(mixed))
        mixed.append(line)
    mixed.append('{"event": "exit", "mod')            # and a cut last line
    bad = write(tmp_path / "bad.jsonl", "".join(mixed))
    runs = [(["summarize"], reference_summary(clean).replace(clean, bad)),
            (["summarize", "--tail", "0"], reference_summary(clean, 0).replace(clean, bad)),
            (["forwards", "--json"], reference_index_json(clean)),
            (["show", "--forward", "1"], reference_show(clean, 1))]
    for args, expected in runs:
        got = run_evmbpf(args[0], bad, *args[1:])
        assert got.returncode == 0, got.stderr
        assert got.stdout == expected, args
        err = got.stderr.splitlines()
        assert len(err) <= 10, f"{len(err)} lines of warnings for {args}"
        named = [int(m.group(1)) for m in
                 (re.search(r"bad\.jsonl:(\d+): corrupt line", e) for e in err) if m]
        assert named == bad_numbers[:5], err
        rest = len(bad_numbers) - 5
        assert (f"bad.jsonl: and {rest} more corrupt lines (lines {bad_numbers[5]} to "
                f"{bad_numbers[-1]})") in got.stderr, err
        assert f"bad.jsonl:{len(mixed)}: the last line is incomplete" in err[-1], err


def test_crlf_and_blank_lines_read_as_python_does(tmp_path):
    lines = corpus_lines("error_nomem.jsonl")
    path = write(tmp_path / "crlf.jsonl",
                 "\r\n".join(line.rstrip("\n") for line in lines) + "\r\n  \n\u00a0\n")
    check_all_commands(path)


def test_empty_file_is_an_empty_trace(tmp_path):
    path = write(tmp_path / "empty.jsonl", "")
    got = run_evmbpf("summarize", path)
    assert got.returncode == 0 and got.stdout == reference_summary(path)
    got = run_evmbpf("show", path, "--forward", "1")
    assert got.stdout == reference_show(path, 1)
    assert run_evmbpf("forwards", path, "--json").stdout == "[]\n"


def test_nothing_usable_fails(tmp_path):
    path = write(tmp_path / "junk.jsonl", "not json\n[1, 2]\n{\"event\": \n")
    for args in (["summarize", path], ["show", path, "--forward", "1"], ["forwards", path]):
        got = run_evmbpf(*args)
        assert got.returncode == 1 and got.stdout == ""
        assert "no usable event" in got.stderr and "junk.jsonl:1:" in got.stderr


def test_missing_file_says_what_the_reference_says(tmp_path):
    path = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError) as expected:
        debug.read_trace(path)
    for args in (["summarize", path], ["show", path, "--forward", "1"], ["forwards", path]):
        got = run_evmbpf(*args)
        assert got.returncode != 0 and got.stdout == ""
        assert got.stderr.strip() == str(expected.value)


def test_run_directory_without_debug(tmp_path):
    with pytest.raises(FileNotFoundError) as expected:
        debug.read_trace(str(tmp_path))
    got = run_evmbpf("summarize", str(tmp_path))
    assert got.returncode != 0 and got.stderr.strip() == str(expected.value)
    got = run_evmbpf("summarize", str(tmp_path) + "/")
    assert "debug" in got.stderr and "//" not in got.stderr


def test_run_directory_reads_trace_jsonl_first(tmp_path):
    (tmp_path / "debug").mkdir()
    shutil.copy(os.path.join(CORPUS, "layers.jsonl"), tmp_path / "debug" / "a.jsonl")
    shutil.copy(os.path.join(CORPUS, "error_mem.jsonl"), tmp_path / "debug" / "trace.jsonl")
    (tmp_path / "debug" / "notes.txt").write_text("not a trace")
    run = str(tmp_path)
    assert run_evmbpf("summarize", run).stdout == reference_summary(run)
    assert run_evmbpf("show", run, "--forward", "1").stdout == reference_show(run, 1)
    os.remove(tmp_path / "debug" / "trace.jsonl")
    assert run_evmbpf("summarize", run).stdout == reference_summary(run)


def test_bad_regex_is_refused():
    path = os.path.join(CORPUS, "layers.jsonl")
    for pattern in ("layers.(", "(?<=a+)b", "[abc"):
        try:
            re.compile(pattern)
            raise AssertionError(pattern)
        except re.error as error:
            why = str(error)
        got = run_evmbpf("show", path, "--forward", "1", "--module", pattern)
        assert got.returncode == 2 and got.stdout == ""
        assert got.stderr == f"evmbpf: --module is not a valid regular expression: {why}\n"


def test_usage_errors():
    path = os.path.join(CORPUS, "layers.jsonl")
    for args in (["show", path], ["summarize", path, "--tail", "x"], ["summarize"],
                 ["forwards", path, "--bogus"], ["show", path, "--forward", "1.5"]):
        got = run_evmbpf(*args)
        assert got.returncode == 2 and "USAGE" in got.stderr, args
    got = run_evmbpf("summarize", "--help")
    assert got.returncode == 0 and "EXAMPLES" in got.stdout


# ---- bounded memory, and the paths only big traces take ----

def many_unwound(path, count):
    with open(path, "w") as handle:
        handle.write(json.dumps({"event": "forward", "forward": 1, "i": 1}) + "\n")
        for k in range(count):
            handle.write(json.dumps({"event": "enter", "module": f"m{k}", "type": "M", "depth": 0,
                                     "phase": "p", "forward": 1, "call": k, "i": 2 * k + 2}) + "\n")
            handle.write(json.dumps({"event": "unwound", "module": f"m{k}", "type": "M",
                                     "depth": k % 3, "forward": 1, "call": k, "args": [],
                                     "deepest": k % 2 == 0, "i": 2 * k + 3}) + "\n")
    return str(path)


def test_more_unwound_events_than_kept_in_memory(tmp_path):
    path = many_unwound(tmp_path / "unwound.jsonl", 70000)
    got = run_evmbpf("summarize", path, "--tail", "4")
    assert got.returncode == 0 and got.stdout == reference_summary(path, 4)


def big_trace(path, forwards):
    event = {"event": "enter", "module": "model.layers.0.self_attn", "type": "Attention",
             "depth": 2, "phase": "loglikelihood", "forward": 0, "call": 0,
             "args": [{"shape": [8, 512, 4096], "dtype": "bfloat16", "device": "cuda:0"}],
             "kwargs": {"use_cache": {"type": "bool", "value": True}}, "mem": None, "i": 0}
    i = 0
    with open(path, "w") as handle:
        for f in range(1, forwards + 1):
            i += 1
            handle.write(json.dumps({"event": "forward", "forward": f, "phase": "loglikelihood",
                                     "samples": [["arc", f, 0, 0]], "batch_rows": 1, "i": i}) + "\n")
            for k in range(50):
                i += 1
                event.update(forward=f, call=i, i=i, event="enter" if k % 2 == 0 else "exit")
                handle.write(json.dumps(event) + "\n")
    return str(path)


def test_memory_does_not_grow_with_the_trace(tmp_path):
    small = big_trace(tmp_path / "small.jsonl", 200)
    large = big_trace(tmp_path / "large.jsonl", 8000)
    assert os.path.getsize(large) > 100e6
    grown = (peak_rss_kb([EVMBPF, "summarize", large], check=False)
             - peak_rss_kb([EVMBPF, "summarize", small], check=False))
    # One index record a forward is all that may grow: well under a kilobyte each.
    assert grown < 8000 * 1.0, f"summarize grew by {grown} KiB over 7800 more forwards"
    got = run_evmbpf("summarize", large)
    assert got.returncode == 0 and "8000 forward(s) in this trace:" in got.stdout


# ---- nothing in a trace crashes the reader ----

JUNK_VALUES = [None, True, False, 0, -1, 1.5, 1e308, "", "nan", "inf", "x" * 300, [], [1, [2]],
               {}, {"a": None}, 2 ** 70, -0.0, "\u00e9\U0001F600", [None, None, None, None]]


def mutate_event(rng, event):
    keys = list(event)
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(keys + ["stats", "shape", "samples", "count", "mem", "depth"])
        target = event
        if rng.random() < 0.4:      # reach into a described value
            nested = [v for v in event.values() if isinstance(v, (dict, list)) and v]
            if nested:
                target = rng.choice(nested)
                if isinstance(target, list):
                    target = rng.choice(target)
                if not isinstance(target, dict):
                    continue
                key = rng.choice(list(target) + ["stats", "shape", "bytes", "value", "len"])
        if rng.random() < 0.2:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(rng.choice(JUNK_VALUES))
    return event


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        choice = rng.random()
        if choice < 0.4:
            data[at] = rng.randrange(256)
        elif choice < 0.7:
            del data[at:at + rng.randint(1, 40)]
        else:
            data[at:at] = rng.choice([b"\n", b"\r", b"{", b"\"", b"\\u00", b"\xc3", b"1e999", b"]"])
    return bytes(data)


def mutated_traces(rng, count):
    sources = [os.path.join(CORPUS, name) for name in CORPUS_TRACES]
    for _ in range(count):
        with open(rng.choice(sources), "rb") as handle:
            data = handle.read()
        if rng.random() < 0.5:
            lines = data.decode().splitlines()
            out = []
            for line in lines:
                if rng.random() < 0.3:
                    line = json.dumps(mutate_event(rng, json.loads(line)))
                out.append(line)
            if rng.random() < 0.3:
                rng.shuffle(out)
            data = ("\n".join(out) + "\n").encode()
        else:
            data = mutate_bytes(rng, data)
        yield data


def test_mutated_traces_never_crash(tmp_path):
    binary = ASAN_BIN if os.access(ASAN_BIN, os.X_OK) else EVMBPF
    rng = random.Random(1234)
    path = str(tmp_path / "mutant.jsonl")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    for n, data in enumerate(mutated_traces(rng, 150)):
        with open(path, "wb") as handle:
            handle.write(data)
        for args in (["summarize", path, "--tail", str(n % 4 - 1)],
                     ["show", path, "--forward", str(n % 3), "--module", r"layers\.\d"],
                     ["forwards", path, "--json"]):
            got = subprocess.run([binary, *args], capture_output=True, timeout=60, env=env)
            stderr = got.stderr.decode(errors="replace")
            if got.returncode >= 128 or got.returncode < 0 or "Sanitizer" in stderr \
                    or "runtime error" in stderr:
                keep = os.path.join(str(tmp_path), f"crash-{n}.jsonl")
                shutil.copy(path, keep)
                pytest.fail(f"{args[0]} crashed (rc {got.returncode}) on {keep}:\n{stderr[-2000:]}")


def test_mutants_match_reference_where_it_does_not_raise(tmp_path):
    """Where the reference reads a damaged trace without raising, so must evmbpf."""
    rng = random.Random(99)
    path = str(tmp_path / "mutant.jsonl")
    compared = 0
    for data in mutated_traces(rng, 120):
        with open(path, "wb") as handle:
            handle.write(data)
        try:
            expected = reference_summary(path, 5)
        except Exception:
            continue                    # the reference raises: evmbpf may differ
        got = run_evmbpf("summarize", path, "--tail", "5")
        assert got.stdout == expected
        compared += 1
    assert compared > 20


def test_kept_crashers_replay():
    if not os.path.isdir(CRASHERS):
        pytest.skip("no kept crashing inputs")
    inputs = [os.path.join(CRASHERS, f) for f in os.listdir(CRASHERS) if f != "README"]
    if not inputs:
        pytest.skip("no kept crashing inputs")
    if not os.access(FUZZER, os.X_OK):
        pytest.skip("the fuzzer is not built (make -C tests fuzz-build needs clang's libFuzzer)")
    got = subprocess.run([FUZZER, *inputs], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]


def test_short_fuzz_run(tmp_path):
    if not os.access(FUZZER, os.X_OK):
        pytest.skip("the fuzzer is not built (make -C tests fuzz-build needs clang's libFuzzer)")
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for name in CORPUS_TRACES:
        with open(os.path.join(CORPUS, name), "rb") as handle:
            data = handle.read()[:60000]
        for mode in (0, 1, 2, 3, 6, 9, 11, 27):   # 11, 27: export chrome, speedscope
            (seeds / f"{name}-{mode}").write_bytes(bytes([mode]) + data)
    seconds = os.environ.get("EVMBPF_FUZZ_SECONDS", "45")
    got = subprocess.run(own_rss([FUZZER, f"-max_total_time={seconds}", "-max_len=65536",
                                  "-timeout=10", "-rss_limit_mb=2048",
                                  f"-artifact_prefix={tmp_path}/", str(seeds)]),
                         capture_output=True, text=True, timeout=int(seconds) + 120)
    crashes = [f for f in os.listdir(tmp_path) if f.startswith(("crash-", "leak-", "timeout-", "oom-"))]
    assert got.returncode == 0 and not crashes, \
        f"the fuzzer found {crashes} (copy them to tests/fuzz/corpus/):\n{got.stderr[-3000:]}"


# ---- golden: traces evmbpf itself writes ----

EVMBPF_WORKLOADS = [("tiny_transformer.py", []), ("raises.py", []), ("phases.py", []),
                    ("reentry.py", []), ("tiny_transformer.py", ["--tail", "30"]),
                    ("tiny_transformer.py", ["--modules", r"layers\.[0-9]+\.attn$"])]


@pytest.fixture(scope="session")
def evmbpf_traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("evmbpf")
    made = []
    for index, (workload, options) in enumerate(EVMBPF_WORKLOADS):
        trace = str(out / f"{index}-{workload}.jsonl")
        run_launch(os.path.join(REF_WORKLOADS, workload), trace, evmbpf_args=options)
        made.append(trace)
    return made


@pytest.mark.root
@pytest.mark.parametrize("index", range(len(EVMBPF_WORKLOADS)),
                         ids=["-".join([w] + o) for w, o in EVMBPF_WORKLOADS])
def test_evmbpf_trace_matches_reference(evmbpf_traces, index):
    path = evmbpf_traces[index]
    assert os.path.exists(path), "evmbpf wrote no trace"
    check_all_commands(path)
