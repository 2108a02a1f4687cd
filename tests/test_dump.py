"""evmbpf dump: every thread's module stack, read from a real target paused inside a
forward, with no probe: the modules and what they were called with equal the reference
tracer's enter events of that forward; the top frame is the line the target sleeps on;
a target its user stopped stays stopped; nothing is left attached."""
import json
import os
import signal
import subprocess
import time

import pytest

from evmbpf_testlib import (EVMBPF, FULL_MATRIX, HOST_PYTHON, OWN_WORKLOADS, RUN_WORKLOAD,
                            MIDFORWARD, host_target, load, paused, perf_links,
                            probes_left, proc_stat, proc_state, python_under, target_of)

pytestmark = pytest.mark.root

MIDFORWARD_ANY = os.path.join(OWN_WORKLOADS, "midforward_any.py")
THREADS = os.path.join(OWN_WORKLOADS, "dump_threads.py")


def lines_of(path, *needles):
    """The line numbers of the lines of path that contain each needle."""
    with open(path) as handle:
        text = handle.read().splitlines()
    return {n: i for n in needles for i, line in enumerate(text, 1) if n in line}


# Pause.forward waits in `while not os.access(resume, os.F_OK) ...: time.sleep(0.01)`
PAUSE_LINES = set(lines_of(MIDFORWARD_ANY, "while not os.access(resume, os.F_OK)",
                           "time.sleep(0.01)").values())


def dump(pid, *args):
    return subprocess.run([EVMBPF, "dump", "--pid", str(pid), *args], capture_output=True,
                          text=True, timeout=60)


def dump_json(pid):
    r = dump(pid, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def reference_enters(target, workload, tmp_path, extra=()):
    """(module, type, depth, phase, args, kwargs) of the reference's first forward."""
    ref = str(tmp_path / "ref.jsonl")
    plain = target.env
    target.env = dict(plain or os.environ, MIDFORWARD_PAUSE="0")
    r = target.reference(workload, ref, extra=extra)
    target.env = plain
    assert r.returncode == 0, r.stderr[-3000:]
    enters = [e for e in load(ref) if e["event"] == "enter"]
    return [(e["module"], e["type"], e["depth"], e["phase"], e["args"], e["kwargs"])
            for e in enters if e["forward"] == enters[0]["forward"]]


def modules_of(thread, kwargs=True):
    return [(m["module"], m["type"], m["depth"], m["phase"], m["args"],
             m["kwargs"] if kwargs else {}) for m in thread["modules"]]


def test_dump_host_mid_forward(evmbpf, tmp_path):
    """Host CPython 3.11 + torch 1.13, paused in the second layer under phase("evaluation"):
    the model and that layer, as the reference's enter events of that forward name and
    describe them, and the top frame's file:line."""
    target = host_target(tmp_path)
    extra = ("--phase", "evaluation")
    ref = reference_enters(target, MIDFORWARD, tmp_path, extra)
    before = probes_left()
    with paused(target, MIDFORWARD, tmp_path, extra) as pid:
        doc = dump_json(pid)
        text = dump(pid)
        assert perf_links(pid) == []
        assert probes_left() == before
        assert proc_state(pid) != "T", "dump left the target stopped"
    assert doc["pid"] == pid and doc["python"].startswith("3.11.")
    assert doc["read"] == "stopped" and doc["consistent"] is True
    (thread,) = doc["threads"]
    assert thread["tid"] == pid and thread["phase"] == "evaluation"
    got = modules_of(thread)
    # the reference's enters up to layers.1: <root>, layers.0 (returned), layers.1
    want = [e for e in ref if e[0] in ("<root>", "layers.1")][:2]
    assert got == want
    assert got[1][4] == [{"shape": [1, 4], "dtype": "float32", "device": "cpu"}]
    frame = thread["frame"]
    assert frame["file"] == MIDFORWARD_ANY and frame["function"] == "Pause.forward"
    assert frame["line"] in PAUSE_LINES
    assert text.returncode == 0, text.stderr
    assert f"Thread {pid} (" in text.stdout and ", phase evaluation" in text.stdout
    assert "    <root> (Model) ([1, 4] float32)\n      layers.1 (Pause) ([1, 4] float32)\n" \
        in text.stdout
    # the target moves between the two reads: either line of its wait
    assert any(f"    Pause.forward ({MIDFORWARD_ANY}:{n})\n" in text.stdout for n in PAUSE_LINES)


def test_dump_threads(evmbpf, tmp_path):
    """Two threads in module calls: each its own stack, the worker's named in the model's
    tree although it called model.side on its own; keyword arguments described."""
    target = host_target(tmp_path)
    with paused(target, THREADS, tmp_path) as pid:
        doc = dump_json(pid)
        tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    stacks = {t["tid"]: t for t in doc["threads"]}
    assert set(stacks) <= tids and pid in stacks
    main = stacks.pop(pid)
    assert [(m["module"], m["type"]) for m in main["modules"]] == [
        ("<root>", "Model"), ("layers.1", "Pause")]
    workers = [t for t in stacks.values() if t["modules"]]
    assert len(workers) == 1
    (worker,) = workers
    tensor = {"shape": [2, 3], "dtype": "float32", "device": "cpu"}
    assert [(m["module"], m["type"], m["args"], m["kwargs"]) for m in worker["modules"]] == [
        ("side", "Block", [tensor], {}),
        ("side.wait", "Wait", [tensor], {"scale": {"type": "float", "value": 2.0}})]
    assert worker["frame"]["function"] == "Wait.forward"
    assert worker["frame"]["line"] == lines_of(THREADS, "time.sleep(0.01)")["time.sleep(0.01)"]
    assert worker["phase"] is None


def test_dump_leaves_a_stopped_target_stopped(evmbpf, tmp_path):
    """A target its user stopped is read as it is, and is still stopped afterwards."""
    target = host_target(tmp_path)
    with paused(target, MIDFORWARD, tmp_path) as pid:
        os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 10
            while proc_state(pid) != "T":
                assert time.monotonic() < deadline
                time.sleep(0.01)
            doc = dump_json(pid)
            time.sleep(0.2)
            assert proc_state(pid) == "T", "dump continued a target its user had stopped"
        finally:
            os.kill(pid, signal.SIGCONT)
    assert doc["read"] == "already-stopped" and doc["held_ms"] == 0
    assert [m["module"] for m in doc["threads"][0]["modules"]] == ["<root>", "layers.1"]


def test_dump_holds_a_foreground_job_unseen(evmbpf, tmp_path):
    """A terminal's foreground job (here in script(1)'s pseudo-terminal): dump holds its
    threads in a ptrace stop, which the terminal's job control does not see (it never
    enters state T), and gets the same stack."""
    target = host_target(tmp_path)
    cmd = target.cmd

    def in_terminal(workload, *extra):
        line = " ".join([HOST_PYTHON, RUN_WORKLOAD, workload, *extra])
        return ["script", "-qfec", line, "/dev/null"]
    target.cmd = in_terminal
    try:
        with paused(target, MIDFORWARD, tmp_path) as pid:
            fields = proc_stat(pid)
            assert fields[2] == fields[5] and fields[4] != "0"  # pgrp == tpgid, a tty
            import threading
            seen, done = set(), threading.Event()

            def watch():
                while not done.is_set():
                    seen.add(proc_stat(pid)[0])
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            doc = dump_json(pid)
            done.set()
            watcher.join(5)
            assert "T" not in seen, seen  # a group-stop: the terminal would see it
    finally:
        target.cmd = cmd
    assert doc["read"] == "stopped" and doc["held_ms"] > 0, doc
    assert doc["consistent"] is True
    (thread,) = doc["threads"]
    assert [(m["module"], m["type"], m["args"]) for m in thread["modules"]] == [
        ("<root>", "Model", [{"shape": [1, 4], "dtype": "float32", "device": "cpu"}]),
        ("layers.1", "Pause", [{"shape": [1, 4], "dtype": "float32", "device": "cpu"}])]
    assert thread["frame"]["line"] in PAUSE_LINES


# sid (3.14 + torch 2.14) with EVMBPF_FULL_MATRIX=1: its torch takes long to import
CELLS = [("pyenv", "3.9"), ("pyenv", "3.10"), ("pyenv", "3.12"), ("pyenv", "3.13"),
         ("chroot", "trixie")] + ([("chroot", "sid")] if FULL_MATRIX else [])


@pytest.mark.parametrize("kind,name", CELLS, ids=[f"{k}-{n}" for k, n in CELLS])
def test_dump_on_other_versions(evmbpf, kind, name, tmp_path):
    """The same picture on CPython 3.9 (co_lnotab, no native thread id), 3.10
    (co_linetable), 3.12/3.13 (the stand-in torch), and Debian trixie's 3.13 + torch 2.6
    (_wrapped_call_impl around _call_impl, self in a cell), sid's 3.14 + torch 2.14
    (tagged stack references): equal to the reference's
    enter events, the top frame on the pausing line."""
    target = target_of(kind, name, tmp_path)
    workload = MIDFORWARD if kind == "chroot" else MIDFORWARD_ANY
    extra = ("--phase", "evaluation")
    ref = reference_enters(target, workload, tmp_path, extra)
    with paused(target, workload, tmp_path, extra) as pid:
        doc = dump_json(pid)
        assert perf_links(pid) == []
    (thread,) = [t for t in doc["threads"] if t["modules"]]
    assert thread["tid"] == pid, doc
    want = [e for e in ref if e[0] in ("<root>", "layers.1")][:2]
    assert modules_of(thread, kwargs=target.kwargs) == \
        [e[:5] + ((e[5] if target.kwargs else {}),) for e in want]
    assert thread["phase"] == "evaluation"
    assert thread["frame"]["function"] == ("Pause.forward" if name not in ("3.9", "3.10")
                                           else "forward")
    assert thread["frame"]["file"].endswith("/tests/workloads/midforward_any.py")
    assert thread["frame"]["line"] in PAUSE_LINES


def test_dump_errors(evmbpf, tmp_path):
    """Bad input: one line naming the problem, a non-zero exit, nothing on stdout."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        cases = {
            "no process": (["dump", "--pid", "999999999"], 1),
            "gone": (["dump", "--pid", "4194000"], 1),
            "not python": (["dump", "--pid", str(sleeper.pid)], 1),
            "no pid": (["dump"], 2),
            "bad pid": (["dump", "--pid", "x"], 2),
            "extra": (["dump", "--pid", "1", "more"], 2),
        }
        for what, (args, code) in cases.items():
            r = subprocess.run([EVMBPF, *args], capture_output=True, text=True, timeout=30)
            assert r.returncode == code, (what, r.stderr)
            assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (what, r.stderr)
        r = subprocess.run([EVMBPF, "dump", "--pid", str(sleeper.pid)], capture_output=True,
                           text=True)
        assert "not a Python interpreter" in r.stderr
    finally:
        sleeper.kill()


@pytest.mark.skipif(not (FULL_MATRIX or os.environ.get("EVMBPF_DUMP_TIMING")),
                    reason="slow: EVMBPF_DUMP_TIMING=1 or EVMBPF_FULL_MATRIX=1")
def test_dump_time_on_a_32_layer_llama(evmbpf, tmp_path):
    """The time dump takes on a 32-layer HF Llama (sid: CPython 3.14, torch 2.14,
    transformers) paused in its last layer's MLP: measured and printed, not asserted
    (`EVMBPF_DUMP_TIMING=1 pytest -s -k llama` shows it); the stack is checked."""
    target = target_of("chroot", "sid", tmp_path)
    workload = os.path.join(OWN_WORKLOADS, "hf_llama32_paused.py")
    runs = []
    with paused(target, workload, tmp_path) as pid:
        for _ in range(5):
            start = time.monotonic()
            doc = dump_json(pid)
            runs.append((time.monotonic() - start, doc["read_ms"], doc["held_ms"]))
        text = dump(pid).stdout
    (thread,) = [t for t in doc["threads"] if t["modules"]]
    assert [(m["module"], m["type"]) for m in thread["modules"]] == [
        ("<root>", "LlamaForCausalLM"), ("model", "LlamaModel"),
        ("model.layers.31", "LlamaDecoderLayer"), ("model.layers.31.mlp", "LlamaMLP"),
        ("model.layers.31.mlp.act_fn", "SiLUActivation" if "SiLUActivation" in text
         else thread["modules"][4]["type"])]
    assert thread["modules"][2]["args"][0]["shape"] == [1, 5, 32]
    print("\n32-layer Llama, evmbpf dump: wall %s ms, read %s ms, target stopped %s ms" % (
        ", ".join(f"{w * 1000:.1f}" for w, _, _ in runs),
        ", ".join(f"{r:.1f}" for _, r, _ in runs), ", ".join(f"{h:.1f}" for _, _, h in runs)))
    print(text)


def test_dump_threads_of_another_pid_namespace(evmbpf, tmp_path):
    """A target in its own pid namespace (a container's) knows its threads by that
    namespace's ids; dump gives the host's, and each thread's top frame."""
    flag = tmp_path / "started"
    code = ("import threading, time\n"
            "def worker():\n"
            "    time.sleep(60)\n"
            "threading.Thread(target=worker).start()\n"
            f"open({str(flag)!r}, 'w').close()\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", HOST_PYTHON, "-c",
                             code], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not flag.exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        pid = python_under(proc.pid, "threading")
        with open(f"/proc/{pid}/status") as handle:
            nspid = [l for l in handle if l.startswith("NSpid:")][0].split()[1:]
        assert len(nspid) == 2 and nspid[1] == "1"
        doc = dump_json(pid)
        tasks = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert {t["tid"] for t in doc["threads"]} == tasks
    frames = {t["tid"]: (t["frame"]["function"], t["frame"]["line"]) for t in doc["threads"]}
    assert frames[pid] == ("<module>", 6)
    assert [f for tid, f in frames.items() if tid != pid] == [("worker", 3)]
