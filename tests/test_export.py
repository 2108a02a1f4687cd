"""`evmbpf export TRACE --format chrome|speedscope`: timelines of real traces.

The traces are made here by the real tracer on real PyTorch workloads: the reference's
tiny transformer and its failing `raises.py` (beside the reference tracer's own traces
of them), a `--tail` trace, four threads killed with SIGKILL mid-forward, and a tracer
killed with SIGKILL mid-write. Their exports are checked against the Trace Event
format's rules (B/E nesting per thread, X durations >= 0, ts monotone per thread) and
speedscope's (O/C nesting per profile, `at` monotone), and event for event against the
trace: every module call once, with its class, inputs, output, call, forward, phase and
times. The speedscope file is then loaded into the speedscope web app (the npm
package's build) in headless Chromium, served from 127.0.0.1, and the page must show
the modules.
"""
import base64
import fcntl
import json
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import threading
import time
import zlib
from collections import Counter, defaultdict
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evmbpf_testlib import (EVMBPF, FUZZ_BUILD, OWN_WORKLOADS, REF_WORKLOADS, Attached, load,
                            peak_rss_kb, run_evmbpf, run_launch, run_reference, torch_major)

FAULT_MODEL = os.path.join(OWN_WORKLOADS, "fault_model.py")
THREADS = os.path.join(OWN_WORKLOADS, "fault_threads.py")
TINY = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
RAISES = os.path.join(REF_WORKLOADS, "raises.py")
NPM_CACHE = os.environ.get("EVMBPF_NPM_CACHE", "/var/cache/evmbpf/npm")
SPEEDSCOPE_VERSION = "1.25.0"
SPEEDSCOPE_APP = os.path.join(NPM_CACHE, "node_modules", "speedscope", "dist", "release")
FORWARDS_TID, PHASES_TID = 100000000, 200000000


def export(trace, fmt, *extra):
    """(completed process, the exported document)."""
    out = f"{trace}.{fmt}.json"
    if os.path.exists(out):
        os.unlink(out)
    r = run_evmbpf("export", trace, "--format", fmt, "-o", out, *extra)
    assert r.returncode == 0, r.stderr
    with open(out) as handle:
        return r, json.load(handle)


def read_cut(path):
    """The events of a trace whose last line may be cut (a killed tracer)."""
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    cut = lines.pop()
    return [json.loads(line) for line in lines if line.strip()], cut


# ---------------------------------------------------------------- the traces

@pytest.fixture(scope="module")
def traces(evmbpf, tmp_path_factory):
    """Traces the tracer writes (root: each test that takes them is marked so; export
    itself only reads a file, and the tests without them run as any user)."""
    d = tmp_path_factory.mktemp("export")
    made = {}
    for name, workload in (("tiny", TINY), ("raises", RAISES)):
        out = str(d / f"{name}.jsonl")
        r = run_launch(workload, out)
        assert os.path.exists(out), r.stderr
        made[name] = out
        ref = str(d / f"{name}-reference.jsonl")
        run_reference(workload, ref)
        assert os.path.exists(ref)
        made[name + "-reference"] = ref

    # what `--tail 40` writes at the end of the same run: its last 40 events, then the
    # count of those it let go (made from the full trace: a third run of the tracer
    # would double this fixture's time for the same bytes)
    with open(made["tiny"]) as handle:
        lines = handle.readlines()
    tail = str(d / "tail.jsonl")
    last_i = json.loads(lines[-1])["i"]
    with open(tail, "w") as handle:
        handle.write("".join(lines[-40:]) + json.dumps(
            {"event": "dropped", "count": len(lines) - 40, "i": last_i + 1}) + "\n")
    made["tail"] = tail

    # four threads inside forwards, the target SIGKILLed: error + unwound per thread
    out = str(d / "threads.jsonl")
    run = Attached(THREADS, out, env=dict(os.environ, THREADS_FORWARDS="100000"))
    run.release()
    time.sleep(0.7)
    run.target.kill()
    run.finish()
    assert run.target_rc == -signal.SIGKILL and run.tracer_rc == 0, run.tracer_err
    made["threads"] = out

    # the tracer SIGKILLed while it writes: no error, no unwound, maybe a cut last line
    out = str(d / "tracer-killed.jsonl")
    run = Attached(FAULT_MODEL, out, env=dict(os.environ, FAULT_SECONDS="4"))
    run.release()
    time.sleep(1.5)
    run.tracer.kill()
    run.finish()
    assert run.tracer_rc == -signal.SIGKILL and run.target_rc == 0, run.target_err
    made["tracer-killed"] = out
    return made


def cut_mid_forward(path, out):
    """A copy of the trace cut in the middle of a line inside a forward, as a tracer
    killed mid-write leaves it, and the events before the cut."""
    with open(path) as handle:
        lines = handle.readlines()
    events = [json.loads(line) for line in lines]
    depth, keep = 0, None
    for n, e in enumerate(events):
        depth += {"enter": 1, "exit": -1}.get(e.get("event"), 0)
        if depth >= 3 and n > len(events) // 2:
            keep = n + 1
            break
    assert keep, "no deep point to cut at"
    with open(out, "w") as handle:
        handle.write("".join(lines[:keep]) + lines[keep][:len(lines[keep]) // 2])
    return events[:keep]


# ---------------------------------------------------------------- the formats' rules

def ns(us):
    """A Chrome ts/dur (microseconds, three decimals) in integer nanoseconds."""
    return round(us * 1000)


def check_nesting(intervals, where):
    """Slices on one track either nest or are disjoint."""
    stack = []
    for start, end, name in sorted(intervals, key=lambda s: (s[0], -s[1])):
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack:
            assert end <= stack[-1][1], (f"{where}: {name} [{start}, {end}] overlaps "
                                         f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}]")
        stack.append((start, end, name))


def chrome_slices(doc):
    """Check the Trace Event rules; return {(pid, tid): [slice]}, a slice being the B
    event with its E's args merged in, "start"/"end" in ns, or an X event."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    by_track = defaultdict(list)
    for e in events:
        assert e["ph"] in ("B", "E", "X", "i", "C", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
            by_track[(e["pid"], e["tid"])].append(e)
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g"), e
    slices = {}
    for track, evs in by_track.items():
        last, stack, done = -1, [], []
        for e in evs:
            if e["ph"] == "X":
                assert e["dur"] >= 0, e
                done.append(dict(e, start=ns(e["ts"]), end=ns(e["ts"]) + ns(e["dur"])))
                continue
            t = ns(e["ts"])
            assert t >= last, f"track {track}: ts goes back from {last} to {t}: {e}"
            last = t
            if e["ph"] == "B":
                stack.append(e)
            elif e["ph"] == "E":
                assert stack, f"track {track}: E without a B: {e}"
                begin = stack.pop()
                assert e.get("name", begin["name"]) == begin["name"], (begin, e)
                merged = dict(begin, start=ns(begin["ts"]), end=t)
                merged["args"] = {**begin.get("args", {}), **e.get("args", {})}
                done.append(merged)
        assert not stack, f"track {track}: slices never closed: {stack}"
        check_nesting([(s["start"], s["end"], s["name"]) for s in done], track)
        slices[track] = done
    return slices


def check_speedscope(doc):
    """speedscope's evented rules; returns {profile name: [(O|C, frame name, at)]}."""
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    assert all(isinstance(f["name"], str) for f in frames)
    profiles = {}
    for p in doc["profiles"]:
        assert p["type"] == "evented" and p["unit"] in ("nanoseconds", "none"), p["name"]
        last, stack, seen = p["startValue"], [], []
        for e in p["events"]:
            assert e["type"] in ("O", "C") and 0 <= e["frame"] < len(frames), e
            assert e["at"] >= last, f"{p['name']}: at goes back: {e}"
            last = e["at"]
            if e["type"] == "O":
                stack.append(e["frame"])
            else:
                assert stack and stack.pop() == e["frame"], f"{p['name']}: C of {e}"
            seen.append((e["type"], frames[e["frame"]]["name"], e["at"]))
        assert not stack, f"{p['name']}: frames left open"
        assert p["endValue"] >= last
        profiles[p["name"]] = seen
    return profiles


# ---------------------------------------------------------------- the trace's content

def desc_text(d):
    """How export renders a descriptor: '8x5x16 float32 cpu', 'tuple[2](...)'."""
    if not isinstance(d, dict):
        return "?"
    if "shape" in d:
        pre = f"{d.get('type')}[{d.get('layers')}] " if "layers" in d else ""
        shape = "x".join(str(n) for n in d["shape"]) or "scalar"
        text = f"{pre}{shape} {d.get('dtype')} {d.get('device')}"
        return text + (" (unreadable)" if d.get("unreadable") else "")
    if "items" in d or "len" in d:
        text = str(d.get("type"))
        if isinstance(d.get("len"), int):
            text += f"[{d['len']}]"
        items = d.get("items")
        if isinstance(items, list):
            text += "(" + ", ".join(desc_text(v) for v in items) + ")"
        elif isinstance(items, dict):
            text += "(" + ", ".join(f"{k}={desc_text(v)}" for k, v in items.items()) + ")"
        return text
    if "value" in d:
        return repr(d["value"])
    return str(d.get("type")) + (" (unreadable)" if d.get("unreadable") else "")


def inputs_text(e):
    return ", ".join([desc_text(a) for a in e.get("args") or []] +
                     [f"{k}={desc_text(v)}" for k, v in (e.get("kwargs") or {}).items()])


def module_slices(doc):
    slices = chrome_slices(doc)
    return {tid: [s for s in ss if s.get("cat") == "module"]
            for (pid, tid), ss in slices.items() if tid < FORWARDS_TID}, slices


def check_against_trace(doc, events, timed=True):
    """Every module call of the trace is one slice on its thread's track, with the
    trace's class, inputs, output, call, forward, phase, depth and times."""
    modules, slices = module_slices(doc)
    t0 = doc["otherData"].get("t0_ns")
    pid = doc["traceEvents"][0]["pid"]
    tid_of = lambda e: e.get("tid", pid)   # noqa: E731
    exits = {(tid_of(e), e["call"]): e for e in events if e.get("event") == "exit"}
    enters = [e for e in events if e.get("event") == "enter"]
    by_call = defaultdict(list)
    for tid, ss in modules.items():
        for s in ss:
            by_call[(tid, s["args"]["call"])].append(s)
    for e in enters:
        got = by_call.get((tid_of(e), e["call"]))
        assert got and len(got) == 1, f"call {e['call']} of {e['module']}: {got}"
        s = got[0]
        assert s["name"] == e["module"] and s["ph"] == "B", s
        args = s["args"]
        assert (args["class"], args["forward"], args["phase"], args["depth"]) == \
            (e["type"], e["forward"], e["phase"], e["depth"]), (s, e)
        assert args["in"] == inputs_text(e), (args["in"], e)
        if timed:
            assert s["start"] == e["ts_ns"] - t0, (s, e)
        x = exits.get((tid_of(e), e["call"]))
        if x:
            assert args["returned"] is True and args["out"] == (
                "-" if x.get("output") is None else desc_text(x["output"])), (s, x)
            if timed:
                assert s["end"] == x["ts_ns"] - t0
    assert sum(len(v) for v in by_call.values()) == len(enters) + sum(
        1 for ss in modules.values() for s in ss if s["ph"] == "X")
    # forwards and phases on their own tracks
    forwards = Counter(tid_of(e) for e in events if e.get("event") == "forward")
    for tid, count in forwards.items():
        track = slices[(pid, tid + FORWARDS_TID)]
        assert [s["name"] for s in track] == [f"forward {e['forward']}" for e in events
                                              if e.get("event") == "forward"
                                              and tid_of(e) == tid]
        assert len(track) == count
        phases = [s["name"] for s in slices[(pid, tid + PHASES_TID)]]
        seen = [e["phase"] for e in events if tid_of(e) == tid and "phase" in e
                and e.get("event") in ("enter", "exit", "unwound", "forward")]
        assert phases == [p for k, p in enumerate(seen) if k == 0 or seen[k - 1] != p]
    return modules, slices


def instants(doc, cat):
    return [e for e in doc["traceEvents"] if e["ph"] == "i" and e.get("cat") == cat]


# ---------------------------------------------------------------- chrome

@pytest.mark.root
@pytest.mark.parametrize("name", ["tiny", "raises", "threads"])
def test_chrome_export_of_a_real_trace(traces, name):
    events = load(traces[name])
    r, doc = export(traces[name], "chrome")
    modules, _ = check_against_trace(doc, events)
    assert sum(len(v) for v in modules.values()) == sum(e["event"] == "enter" for e in events)
    assert doc["otherData"]["header"]["tracer"]["name"] == "evmbpf"
    unwound = [e for e in events if e["event"] == "unwound"]
    got = instants(doc, "unwound")
    assert [(i["tid"], i["args"]["call"], i["args"]["reason"], i["args"]["deepest"])
            for i in got] == [(e["tid"], e["call"], e["reason"], e["deepest"]) for e in unwound]
    by_call = {(tid, s["args"]["call"]): s for tid, ss in modules.items() for s in ss}
    for e in unwound:
        s = by_call[(e["tid"], e["call"])]
        assert s["args"].get("did_not_return") is True and "returned" not in s["args"], s
    errors = [e for e in events if e["event"] == "error"]
    got = instants(doc, "error")
    assert [(i["name"], i["args"]["message"], i["args"]["module"]) for i in got] == \
        [(f"error: {e['exc_type']}", e["message"], e["module"]) for e in errors]
    if name == "threads":
        assert len(modules) == 4 and errors[0]["exc_type"] == "SIGKILL"
        assert any(e["reason"] == "process exited" for e in unwound)
    if name == "raises":
        assert errors and any(e["reason"] != "process exited" for e in unwound)
        assert "Traceback" in got[0]["args"]["traceback"]
    assert "unfinished" not in r.stderr


@pytest.mark.root
@pytest.mark.parametrize("name", ["tiny", "raises"])
def test_chrome_export_matches_the_reference_tracers_trace(traces, name):
    """The in-process tracer's trace of the same work (no timestamps: one event a
    microsecond) exports to the same module slices, args and nesting."""
    ours = module_slices(export(traces[name], "chrome")[1])[0]
    r, ref_doc = export(traces[name + "-reference"], "chrome")
    assert "no timestamps" in r.stderr
    check_against_trace(ref_doc, load(traces[name + "-reference"]), timed=False)
    theirs = module_slices(ref_doc)[0]
    assert len(ours) == len(theirs) == 1
    ours, theirs = next(iter(ours.values())), next(iter(theirs.values()))
    assert len(ours) == len(theirs)
    old_torch = torch_major() < 2
    for a, b in zip(ours, theirs):
        # torch < 2 shows the in-process tracer no kwargs: its inputs are a prefix
        a_in, b_in = a["args"].pop("in"), b["args"].pop("in")
        assert a_in.startswith(b_in) if old_torch else a_in == b_in, (a_in, b_in)
        assert (a["name"], a["args"]) == (b["name"], b["args"])


@pytest.mark.root
def test_tail_trace_calls_entered_before_it(traces):
    """A --tail trace starts inside calls: their exits become complete (X) slices from
    the last event that cannot have been inside them."""
    events = load(traces["tail"])
    _, doc = export(traces["tail"], "chrome")
    modules, _ = check_against_trace(doc, events)
    xs = [s for ss in modules.values() for s in ss if s["ph"] == "X"]
    entered = {e["call"] for e in events if e.get("event") == "enter"}
    unmatched = [e for e in events if e.get("event") == "exit" and e["call"] not in entered]
    assert unmatched, "the tail starts between calls: no exit without its enter"
    assert [(s["name"], s["args"]["call"]) for s in xs] == \
        [(e["module"], e["call"]) for e in unmatched]
    assert all(s["args"]["enter_not_in_trace"] is True for s in xs)
    r, ss = export(traces["tail"], "speedscope")
    check_speedscope(ss)
    assert f"{len(unmatched)} exit" in r.stderr and "--format chrome shows them" in r.stderr


def open_calls(events):
    stacks = defaultdict(list)
    for e in events:
        if e.get("event") == "enter":
            stacks[e["tid"]].append(e)
        elif e.get("event") == "exit":
            assert stacks[e["tid"]][-1]["call"] == e["call"]
            stacks[e["tid"]].pop()
    return {tid: s for tid, s in stacks.items() if s}


def check_unfinished(doc, events):
    """Calls open where the trace ends close at its last timestamp, marked."""
    modules, slices = check_against_trace(doc, events)
    t0, last = doc["otherData"]["t0_ns"], max(e["ts_ns"] for e in events if "ts_ns" in e)
    open_now = open_calls(events)
    by_call = {(tid, s["args"]["call"]): s for tid, ss in modules.items() for s in ss}
    marked = [s for ss in modules.values() for s in ss if s["args"].get("unfinished")]
    assert sorted(s["args"]["call"] for s in marked) == \
        sorted(e["call"] for s in open_now.values() for e in s)
    for tid, stack in open_now.items():
        for e in stack:
            s = by_call[(tid, e["call"])]
            assert s["end"] == last - t0 and "returned" not in s["args"], s
    return open_now


@pytest.mark.root
def test_cut_trace_modules_left_open_end_marked(traces, tmp_path):
    """The tiny trace cut mid-line inside a forward, as a killed tracer leaves it."""
    cut = str(tmp_path / "cut.jsonl")
    events = cut_mid_forward(traces["tiny"], cut)
    for fmt in ("chrome", "speedscope"):
        r, doc = export(cut, fmt)
        assert "the last line is incomplete, cut off mid-write" in r.stderr
        assert re.search(r"\d+ module calls? had not returned where the trace ends", r.stderr)
        if fmt == "chrome":
            assert len(check_unfinished(doc, events)[events[-1]["tid"]]) >= 3
        else:
            (name, seen), = check_speedscope(doc).items()
            opened = [n for kind, n, at in seen if kind == "O"]
            assert opened == [f"{e['module']} ({e['type']})" for e in events
                              if e.get("event") == "enter"]
            assert seen[-1][2] == doc["profiles"][0]["endValue"]


@pytest.mark.root
def test_tracer_killed_mid_write(traces):
    events, cut = read_cut(traces["tracer-killed"])
    assert not [e for e in events if e["event"] in ("error", "unwound")]
    r, doc = export(traces["tracer-killed"], "chrome")
    check_unfinished(doc, events)
    if cut:
        assert "cut off mid-write" in r.stderr
    check_speedscope(export(traces["tracer-killed"], "speedscope")[1])


def test_mem_counters_and_dropped(tmp_path):
    """mem (a CUDA run's, which this machine cannot make) becomes counter tracks; a
    dropped count an instant event."""
    path = tmp_path / "mem.jsonl"
    mem = lambda a: {"allocated": a, "reserved": 2 * a, "max_allocated": 3 * a}  # noqa: E731
    lines = [{"event": "forward", "forward": 1, "phase": "p", "i": 1, "tid": 7, "ts_ns": 10},
             {"event": "enter", "module": "<root>", "type": "M", "depth": 0, "phase": "p",
              "forward": 1, "call": 1, "args": [], "kwargs": {}, "mem": mem(100), "i": 2,
              "tid": 7, "ts_ns": 1000},
             {"event": "dropped", "count": 5, "where": "ring buffer", "i": 3, "tid": 7,
              "ts_ns": 1500},
             {"event": "error", "exc_type": "OutOfMemoryError", "message": "CUDA out of memory",
              "phase": "p", "module": "<root>", "forward": 1, "mem": mem(900), "i": 4,
              "tid": 7, "ts_ns": 2500}]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    r, doc = export(str(path), "chrome")
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [(e["ts"], e["args"]) for e in counters] == [(0.99, mem(100)), (2.49, mem(900))]
    assert [e["name"] for e in instants(doc, "dropped")] == ["dropped 5"]
    chrome_slices(doc)


# ---------------------------------------------------------------- speedscope

@pytest.mark.root
@pytest.mark.parametrize("name", ["tiny", "threads"])
def test_speedscope_export_of_a_real_trace(traces, name):
    events = load(traces[name])
    _, doc = export(traces[name], "speedscope")
    profiles = check_speedscope(doc)
    tids = sorted({e["tid"] for e in events if e.get("event") == "enter"})
    assert sorted(profiles) == sorted(f"thread {t}" for t in tids)
    for tid in tids:
        mine = [e for e in events if e.get("tid") == tid and e.get("event") == "enter"]
        seen = profiles[f"thread {tid}"]
        opened = [(n, at) for kind, n, at in seen if kind == "O"]
        assert [n for n, _ in opened] == [f"{e['module']} ({e['type']})" for e in mine]
        # times: the trace's, on one clock for every thread
        base = min(e["ts_ns"] for e in events if "ts_ns" in e)
        assert [at for _, at in opened] == [e["ts_ns"] - base for e in mine]


# ---------------------------------------------------------------- in a real browser

def png_pixels(path, max_rows=None):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG (what Chromium
    writes), decoded with zlib alone."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(min(height, max_rows or height)):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def flame_chart_drawn(shot):
    """(drawn, why): one saturated colour (the root's bar) fills most of a row of the
    root's band (rows 140-170, under the toolbar and the minimap; the time grid's lines
    cross it), and the rows under it hold boxes of at least 6 colours."""
    width, _, rows = png_pixels(shot, max_rows=240)
    saturated = lambda px: max(px) - min(px) > 40   # noqa: E731
    widest = max(max(Counter(px for px in row if saturated(px)).values(), default=0)
                 for row in rows[140:170])
    colours = {px for row in rows[170:240] for px in row if saturated(px)}
    why = f"root's colour on {widest} of {width} px, {len(colours)} colours under it"
    return widest > 0.6 * width and len(colours) >= 6, why


def speedscope_app():
    """The speedscope web app from its npm package (installed into NPM_CACHE once)."""
    if not os.path.exists(os.path.join(SPEEDSCOPE_APP, "index.html")):
        if not shutil.which("npm"):
            pytest.skip("npm is not installed (scripts/install-deps.sh installs it)")
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", NPM_CACHE,
                            f"speedscope@{SPEEDSCOPE_VERSION}"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            pytest.skip(f"npm cannot install speedscope: {r.stderr.strip()[-300:]}")
    return SPEEDSCOPE_APP


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium (scripts/install-deps.sh installs Debian's chromium)")


class Page:
    """One headless Chromium tab driven over the DevTools protocol on a pipe (fds 3 and
    4, messages ended by NUL): the tests wait for what they look for, with a deadline,
    instead of a fixed virtual-time budget. speedscope fills its tables in an animation
    frame after it measures their box; a DOM dumped at the end of a budget could come
    before that frame (CI saw the sandwich table empty once)."""

    def __init__(self, exe, profile, width, height):
        to_browser, self._send_fd = os.pipe()
        self._recv_fd, from_browser = os.pipe()
        def pipe_fds():  # the browser's end of the pipes on fds 3 and 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--enable-unsafe-swiftshader", f"--user-data-dir={profile}", "--no-first-run",
             "--remote-debugging-pipe", f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=pipe_fds, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        os.close(to_browser)
        os.close(from_browser)
        self._buf, self._id, self.session, self.events = b"", 0, None, set()
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]

    def call(self, method, deadline=60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._send_fd, json.dumps(msg).encode() + b"\0")
        reply = self._read(lambda m: m.get("id") == self._id, method, deadline)
        assert "error" not in reply, (method, reply["error"])
        return reply["result"]

    def _read(self, wanted, what, deadline):
        """The first message from the browser that is wanted; the events on the way are
        kept by name in self.events."""
        end = time.monotonic() + deadline
        while True:
            while b"\0" in self._buf:
                line, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(line)
                if "method" in msg:
                    self.events.add(msg["method"])
                if wanted(msg):
                    return msg
            left = end - time.monotonic()
            assert left > 0, f"Chromium did not answer {what} in {deadline} s"
            ready, _, _ = select.select([self._recv_fd], [], [], left)
            chunk = os.read(self._recv_fd, 1 << 20) if ready else b""
            assert chunk or not ready, \
                f"Chromium closed its pipe: {self.proc.stderr.read()[-2000:]!r}"
            self._buf += chunk

    def open(self, url):
        """Navigates to url and waits for its load event."""
        self.call("Page.enable")
        self.events.discard("Page.loadEventFired")
        self.call("Page.navigate", url=url)
        if "Page.loadEventFired" not in self.events:
            self._read(lambda m: m.get("method") == "Page.loadEventFired", "a load", 60)

    def dom(self):
        return self.call("Runtime.evaluate", expression="document.documentElement.outerHTML",
                         returnByValue=True)["result"]["value"]

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))

    def wait(self, what, seconds):
        """what() every 0.2 s until it is true or `seconds` pass; its last value."""
        end = time.monotonic() + seconds
        while True:
            got = what()
            if got or time.monotonic() > end:
                return got
            time.sleep(0.2)

    def close(self):
        try:
            self.call("Browser.close", deadline=10)
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._send_fd)
        os.close(self._recv_fd)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium on the speedscope app, served with the exports from 127.0.0.1:
    browser(export, view, width, height) gives a Page showing it (export None: the app's
    page without a profile)."""
    app, exe, data = speedscope_app(), chromium(), str(tmp_path_factory.mktemp("www"))

    class Handler(SimpleHTTPRequestHandler):
        def translate_path(self, path):
            name = os.path.basename(path.split("?")[0].split("#")[0]) or "index.html"
            return os.path.join(data if path.startswith("/data/") else app, name)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pages = []

    def load_page(export_path, view, width, height):
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        if export_path:
            name = os.path.basename(export_path)
            shutil.copy(export_path, os.path.join(data, name))
            url += f"#profileURL=/data/{name}&view={view}"
        page = Page(exe, str(tmp_path_factory.mktemp("chromium-profile")), width, height)
        pages.append(page)
        page.open(url)
        return page

    yield load_page
    for page in pages:
        page.close()
    server.shutdown()


def unescaped(dom):
    return dom.replace("&lt;", "<").replace("&gt;", ">")


@pytest.mark.root
def test_speedscope_renders_the_modules_in_chromium(traces, browser, tmp_path):
    events = load(traces["tiny"])
    _, doc = export(traces["tiny"], "speedscope")
    exported = traces["tiny"] + ".speedscope.json"
    names = [f["name"] for f in doc["shared"]["frames"]]
    tid = next(e["tid"] for e in events if e.get("event") == "enter")

    # the sandwich view lists every frame by name in the page's DOM
    page = browser(exported, "sandwich", 1280, 2400)
    missing = lambda text: [n for n in names if f">{n}</td>" not in text]  # noqa: E731
    dom = page.wait(lambda: (lambda d: d if not missing(unescaped(d)) else None)(page.dom()), 60)
    dom = dom or page.dom()
    assert "<title>tiny.jsonl - speedscope</title>" in dom, dom[:2000]
    assert f"thread {tid}" in dom
    assert not missing(unescaped(dom)), f"not in the sandwich table: {missing(unescaped(dom))}"

    # the time-ordered flame chart draws them: the root's bar across the chart, its
    # children's boxes in many colours under it; the app's page without a profile (its
    # welcome page, with a big blue button) must not pass for one
    shot = str(tmp_path / "speedscope.png")
    page = browser(exported, "time-ordered", 1280, 800)
    drawn = page.wait(lambda: page.screenshot(shot) or (lambda d: d if d[0] else None)(
        flame_chart_drawn(shot)), 60) or flame_chart_drawn(shot)
    blank = str(tmp_path / "no-profile.png")
    page = browser(None, "time-ordered", 1280, 800)
    page.wait(lambda: "speedscope" in page.dom(), 60)
    time.sleep(3)  # the welcome page has settled: a chart would be drawn by now
    page.screenshot(blank)
    assert not flame_chart_drawn(blank)[0], "the check passes on a page without a profile"
    assert drawn[0], f"no flame chart in {shot}: {drawn[1]}"
    print(f"\nspeedscope screenshot: {shot} ({drawn[1]})")


@pytest.mark.root
def test_speedscope_threads_in_chromium(traces, browser):
    """The four-thread SIGKILL trace: one profile a thread, the first one shown."""
    _, doc = export(traces["threads"], "speedscope")
    page = browser(traces["threads"] + ".speedscope.json", "sandwich", 1280, 1600)
    dom = page.wait(lambda: (lambda d: d if "<root> (Model)" in unescaped(d) else None)(
        page.dom()), 60) or page.dom()
    assert "<title>threads.jsonl - speedscope</title>" in dom
    assert doc["profiles"][0]["name"] in dom
    assert "<root> (Model)" in unescaped(dom)


# ---------------------------------------------------------------- bad input, output files

@pytest.mark.root
def test_output_file_rules(traces, tmp_path):
    trace = traces["tiny"]
    out = tmp_path / "t.json"
    r = run_evmbpf("export", trace, "-o", str(out))
    assert r.returncode == 0 and oct(out.stat().st_mode & 0o777) == "0o600"
    json.loads(out.read_text())
    out.write_text("keep me")
    r = run_evmbpf("export", trace, "-o", str(out))
    assert r.returncode == 1 and "exists" in r.stderr and "--force" in r.stderr
    assert out.read_text() == "keep me"
    r = run_evmbpf("export", trace, "-o", str(out), "--force", "--format", "speedscope")
    assert r.returncode == 0 and json.loads(out.read_text())["profiles"]
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    r = run_evmbpf("export", trace, "-o", str(link), "--force")
    assert r.returncode == 1 and "symbolic link" in r.stderr
    assert not (tmp_path / "elsewhere.json").exists()
    copy = tmp_path / "copy.jsonl"
    shutil.copy(trace, copy)
    r = run_evmbpf("export", str(copy), "-o", str(copy), "--force")
    assert r.returncode == 1 and "the trace itself" in r.stderr
    assert copy.read_bytes() == open(trace, "rb").read()
    # stdout: when it is not a terminal, and "-o -"
    r = run_evmbpf("export", trace)
    assert r.returncode == 0 and json.loads(r.stdout)["traceEvents"]
    r = run_evmbpf("export", trace, "-o", "-", "--format", "speedscope")
    assert r.returncode == 0 and json.loads(r.stdout)["profiles"]


def test_bad_input(tmp_path):
    r = run_evmbpf("export", str(tmp_path / "nope.jsonl"))
    assert r.returncode == 1 and r.stderr.strip() == f"no trace at {tmp_path / 'nope.jsonl'}"
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n[1]\n")
    out = tmp_path / "junk.json"
    r = run_evmbpf("export", str(junk), "-o", str(out))
    assert r.returncode == 1 and "no usable event" in r.stderr and "nothing to export" in r.stderr
    assert not out.exists(), "a failed export left its file"
    for args in (["--format", "svg"], ["--bogus"], ["--format"], ["-o", ""]):
        r = run_evmbpf("export", str(junk), *args)
        assert r.returncode == 2 and "USAGE" in r.stderr, args
    r = subprocess.run([EVMBPF, "export"], capture_output=True, text=True)
    assert r.returncode == 2 and "export needs a TRACE" in r.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for fmt in ("chrome", "speedscope"):
        r = run_evmbpf("export", str(empty), "--format", fmt)
        assert r.returncode == 0 and "empty trace" in r.stderr
        json.loads(r.stdout)


@pytest.mark.root
def test_stdout_terminal_is_refused(traces):
    """JSON is not for a terminal: without -o, a tty on stdout is refused (script(1)
    gives the command one)."""
    if not shutil.which("script"):
        pytest.skip("no script(1)")
    r = subprocess.run(["script", "-qec", f"{EVMBPF} export {traces['tiny']}", "/dev/null"],
                       capture_output=True, text=True, timeout=60)
    assert "give -o FILE, or redirect stdout" in r.stdout and '"traceEvents"' not in r.stdout


# ---------------------------------------------------------------- bounded memory

def synthetic_trace(path, forwards, threads=1):
    """forwards forwards of a 64-module model on each of `threads` threads, interleaved
    forward by forward."""
    tensor = {"shape": [8, 512, 4096], "dtype": "bfloat16", "device": "cuda:0"}
    i, t = 0, 1000

    def event(kind, module, depth, forward, call, tid, **more):
        nonlocal i, t
        i, t = i + 1, t + 10
        return json.dumps({"event": kind, "module": module, "type": "Block", "depth": depth,
                           "phase": "p", "forward": forward, "call": call, **more, "i": i,
                           "tid": tid, "ts_ns": t}) + "\n"

    with open(path, "w") as handle:
        for f in range(1, forwards + 1):
            for tid in range(100, 100 + threads):
                root = i + 2
                handle.write(event("forward", None, 0, f, None, tid))
                handle.write(event("enter", "<root>", 0, f, root, tid, args=[tensor], kwargs={}))
                for k in range(63):
                    handle.write(event("enter", f"layers.{k}", 1, f, i + 1, tid,
                                       args=[tensor], kwargs={}))
                    handle.write(event("exit", f"layers.{k}", 1, f, i, tid, output=tensor))
                handle.write(event("exit", "<root>", 0, f, root, tid, output=tensor))
    return str(path)


def test_memory_does_not_grow_with_the_trace(tmp_path):
    small = synthetic_trace(tmp_path / "small.jsonl", 20, threads=3)
    large = synthetic_trace(tmp_path / "large.jsonl", 600, threads=3)
    assert os.path.getsize(large) > 50e6
    for fmt in ("chrome", "speedscope"):
        base = peak_rss_kb([EVMBPF, "export", small, "--format", fmt, "-o", "-"])
        grown = peak_rss_kb([EVMBPF, "export", large, "--format", fmt, "-o", "-"]) - base
        print(f"\nexport --format {fmt}: {base} KiB for the small trace, +{grown} KiB for "
              f"{os.path.getsize(large) >> 20} MiB")
        assert grown < 2000, f"export --format {fmt} grew by {grown} KiB"
    r, doc = export(large, "speedscope")
    profiles = check_speedscope(doc)
    assert len(profiles) == 3 and all(len(p) == 600 * 128 for p in profiles.values())


# ---------------------------------------------------------------- damaged traces

ASAN_BIN = os.path.join(FUZZ_BUILD, "readers_asan")


def mutants(rng, lines, count):
    """Damaged copies of a trace: lines dropped, repeated, swapped, cut, values changed."""
    values = [None, -1, 0, 2 ** 70, 1.5, "x", [], {}, True, "nan"]
    for _ in range(count):
        out = list(lines)
        for _ in range(rng.randrange(1, 6)):
            k = rng.randrange(len(out))
            how = rng.randrange(5)
            if how == 0:
                del out[k]
            elif how == 1:
                out.insert(k, out[rng.randrange(len(out))])
            elif how == 2:
                j = rng.randrange(len(out))
                out[k], out[j] = out[j], out[k]
            elif how == 3:
                out[k] = out[k][:rng.randrange(len(out[k]))] + "\n"
            else:
                try:
                    e = json.loads(out[k])
                except ValueError:
                    continue
                if isinstance(e, dict) and e:
                    e[rng.choice(list(e))] = rng.choice(values)
                    out[k] = json.dumps(e) + "\n"
        yield "".join(out)


@pytest.mark.root
def test_damaged_traces_export_valid_files(traces, tmp_path):
    """Whatever a damaged trace holds, the export is valid JSON that keeps the formats'
    rules (with the sanitizer build when there is one: no crash, no leak)."""
    binary = ASAN_BIN if os.access(ASAN_BIN, os.X_OK) else EVMBPF
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="halt_on_error=1")
    with open(traces["threads"]) as handle:
        lines = handle.readlines()[:3000]
    rng = random.Random(5)
    path = str(tmp_path / "damaged.jsonl")
    for n, text in enumerate(mutants(rng, lines, 20)):
        with open(path, "w") as handle:
            handle.write(text)
        for fmt in ("chrome", "speedscope"):
            r = subprocess.run([binary, "export", path, "--format", fmt, "-o", "-"],
                               capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 0 and "Sanitizer" not in r.stderr \
                and "runtime error" not in r.stderr, (n, fmt, r.stderr[-2000:])
            doc = json.loads(r.stdout)
            if fmt == "chrome":
                chrome_slices(doc)
            else:
                check_speedscope(doc)


def hand_event(kind, tid, ts, forward, module=None, depth=None, call=None, **more):
    """An event of a hand-made trace (a module's when module is given)."""
    e = {"event": kind, "phase": "p", "forward": forward, "tid": tid, "ts_ns": ts, **more}
    if module is not None:
        e.update(module=module, type="Block", depth=depth, call=call)
    return e


def write_events(path, events):
    path.write_text("".join(json.dumps(dict(e, i=n + 1)) + "\n" for n, e in enumerate(events)))
    return str(path)


def test_damaged_trace_exits_without_enters_nest(tmp_path):
    """Two threads inside forwards at once, each with exits whose enter the damaged
    trace does not hold before them. Such an exit's complete slice starts at the last
    event of its depth or above; here the damage puts that event inside a call that
    ends before the exit, and a slice from there would overlap the call (a child
    slice starting before its parent)."""
    ev = hand_event
    trace = write_events(tmp_path / "damaged.jsonl", [
        ev("forward", 7, 1000, 1), ev("enter", 7, 1000, 1, "<root>", 0, 1),
        ev("forward", 8, 1001, 2), ev("enter", 8, 1001, 2, "<root>", 0, 2),
        ev("exit", 8, 1002, 2, "<root>", 0, 2),
        ev("forward", 8, 1005, 3), ev("enter", 8, 1005, 3, "<root>", 0, 5),
        # thread 7's enter of blocks.0 (ts 1020) is moved below, into blocks.0.inner.lin
        ev("enter", 7, 1030, 1, "blocks.0.inner", 2, 4),
        ev("enter", 8, 1035, 3, "blocks.0", 1, 6),
        ev("enter", 7, 1040, 1, "blocks.0.inner.lin", 3, 7),
        ev("enter", 8, 1045, 3, "blocks.0.inner", 2, 8),
        # thread 8: its first forward's root exit again, inside blocks.0.inner
        ev("exit", 8, 1002, 2, "<root>", 0, 2),
        ev("enter", 7, 1020, 1, "blocks.0", 1, 3),
        ev("exit", 7, 1050, 1, "blocks.0.inner.lin", 3, 7),
        ev("exit", 7, 1060, 1, "blocks.0.inner", 2, 4),
        ev("exit", 8, 1065, 3, "blocks.0.inner", 2, 8),
        ev("exit", 7, 1070, 1, "blocks.0", 1, 3),
        ev("exit", 8, 1075, 3, "blocks.0", 1, 6),
        ev("exit", 7, 1080, 1, "<root>", 0, 1),
        # thread 8's root exit with its call number corrupted
        ev("exit", 8, 1085, 3, "<root>", 0, "x"),
    ])
    r, doc = export(trace, "chrome")
    slices = chrome_slices(doc)
    xs = [(tid, s["name"], s["args"]["call"], s["start"], s["end"])
          for (_, tid), ss in slices.items() for s in ss if s["ph"] == "X"]
    # blocks.0 of thread 7 from the end of blocks.0.inner (not from where its enter
    # was moved to, inside it); thread 8's root from the end of blocks.0 (not from the
    # repeated exit's, inside it); the repeated exit itself where it was found
    assert xs == [(7, "blocks.0", 3, 60, 70), (8, "<root>", 2, 45, 45),
                  (8, "<root>", "x", 75, 85)]
    assert "1 module call had not returned" in r.stderr
    check_speedscope(export(trace, "speedscope")[1])


def test_damaged_trace_counters_and_tid_0_in_time_order(tmp_path):
    """Counters of every thread share track 0: an event out of order (a thread's time
    ahead of another's) must not send them back in time, nor a tid of 0 put a thread's
    slices on their track."""
    mem = {"allocated": 100, "reserved": 200, "max_allocated": 300}
    ev = hand_event
    trace = write_events(tmp_path / "damaged.jsonl", [
        ev("enter", 7, 1000, 1, "<root>", 0, 1, mem=mem),
        ev("enter", 8, 1300, 2, "<root>", 0, 2, mem=mem),
        ev("enter", 7, 1150, 1, "blocks.0", 1, 3, mem=mem),
        ev("enter", 0, 1200, 3, "<root>", 0, 4),
        ev("exit", 0, 1250, 3, "<root>", 0, 4),
        ev("exit", 7, 1400, 1, "blocks.0", 1, 3),
    ])
    _, doc = export(trace, "chrome")
    slices = chrome_slices(doc)
    counters = [e["ts"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert counters == [0, 0.3, 0.3]
    assert not [s for (_, tid), ss in slices.items() if tid == 0 for s in ss]
    check_speedscope(export(trace, "speedscope")[1])
