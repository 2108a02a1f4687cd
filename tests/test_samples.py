"""The host's note_samples(contexts) and without_samples(), seen from outside: `forward`
and `error` events carry the reference's `samples` and `batch_rows`, a new batch
reconciles the frames left on the stack, and `evmbpf summarize` says which documents
were in flight when the job died."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from evmbpf_testlib import (EVMBPF, FULL_MATRIX, OWN_WORKLOADS, REFERENCE, Attached, chroot_ensure,
                            chroot_target, compare_traces, load, pyenv_target, run_launch,
                            run_reference, host_kwargs)

# documents in flight are watched by a hardware breakpoint on note_samples
pytestmark = [pytest.mark.root, pytest.mark.debug_registers]
WORKLOAD = os.path.join(OWN_WORKLOADS, "samples_eval.py")
KWARGS = host_kwargs()
SAMPLED = ("event", "forward", "phase", "samples", "batch_rows")


def compare_samples(ref, got, kwargs=True):
    """compare_traces, and the samples of every forward and error event."""
    compare_traces(ref, got, kwargs=kwargs)
    pick = [e for e in ref if e["event"] in ("forward", "error")]
    mine = [e for e in got if e["event"] in ("forward", "error")]
    assert [{k: e.get(k) for k in SAMPLED} for e in mine] == \
        [{k: e.get(k) for k in SAMPLED} for e in pick]


def check_workload_shape(events):
    """The cases the workload is for are in the trace (so the comparison covers them)."""
    forwards = [e for e in events if e["event"] == "forward"]
    assert forwards[0]["samples"] == [["arc_easy", 0, 0, 0], ["arc_easy", 0, 1, 1]]
    assert forwards[1]["samples"] == forwards[0]["samples"]          # sticky
    assert forwards[2]["samples"] is None and forwards[2]["phase"] == "model_forward"
    assert forwards[3]["samples"] == forwards[0]["samples"]          # restored
    assert forwards[4]["samples"] == [["hellaswag", 7, None, 0], [None, 8, None, 0],
                                      ["hellaswag", 9, 2, 3]]
    assert forwards[4]["batch_rows"] == 4
    assert forwards[5]["samples"] == [["piqa", 12, None, 0], ["piqa", 13, None, 1]]
    assert forwards[7]["samples"] is None                            # an empty batch
    assert forwards[8]["samples"] == [["t\u00e2che \u2603", 2 ** 40, -3, 2]]
    reasons = [e["reason"] for e in events if e["event"] == "unwound"]
    assert "a new batch was declared" in reasons and "a new forward began" in reasons


@pytest.fixture(scope="module")
def reference_trace(tmp_path_factory):
    ref = str(tmp_path_factory.mktemp("samples") / "ref.jsonl")
    result = run_reference(WORKLOAD, ref)
    assert result.returncode == 0, result.stderr
    return load(ref)


def test_samples_match_reference(evmbpf, tmp_path, reference_trace):
    got = str(tmp_path / "got.jsonl")
    result = run_launch(WORKLOAD, got)
    assert result.returncode == 0, result.stderr
    events = load(got)
    check_workload_shape(events)
    compare_samples(reference_trace, events, kwargs=KWARGS)
    assert "note_samples" not in result.stderr, result.stderr


def test_samples_attached_by_pid(evmbpf, tmp_path, reference_trace):
    """evalmetry.debug imported before the attach: found in sys.modules."""
    got = str(tmp_path / "got.jsonl")
    run = Attached(WORKLOAD, got)
    run.release()
    run.finish()
    assert run.target_rc == 0 and run.tracer_rc == 0, run.tracer_err
    events = load(got)
    check_workload_shape(events)
    compare_samples(reference_trace, events, kwargs=KWARGS)


def summaries(path):
    """evmbpf summarize and the reference reader's, on one trace."""
    sys.path.insert(0, REFERENCE)
    from evalmetry import debug  # pylint: disable=import-outside-toplevel
    ours = subprocess.run([EVMBPF, "summarize", path], capture_output=True, text=True,
                          timeout=60)
    assert ours.returncode == 0, ours.stderr
    text = re.sub(r"(?m)^  evalmetry debug ", "  evmbpf show ", debug.summarize_trace(path))
    return ours.stdout, text + "\n"


def in_flight(text):
    return [line.strip() for line in text.splitlines() if "documents in flight" in line]


def test_summarize_documents_in_flight(evmbpf, tmp_path):
    """A forward of the last batch raises, uncaught: both traces' error names its
    documents, and evmbpf summarize prints them as the reference reader does."""
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    env = dict(os.environ, SAMPLES_RAISE="1")
    run_reference(WORKLOAD, ref, env=env)
    result = run_launch(WORKLOAD, got, env=env)
    assert result.returncode != 0, result.stderr
    compare_samples(load(ref), load(got), kwargs=KWARGS)
    ours, theirs = summaries(got)
    assert ours == theirs
    expected = ["documents in flight: t\u00e2che \u2603#1099511627776x1"]
    assert in_flight(ours) == expected
    assert in_flight(summaries(ref)[1]) == expected


def test_killed_mid_batch_names_its_documents(evmbpf, tmp_path):
    """SIGKILL inside a forward: the trace's error carries the batch that was running."""
    got = str(tmp_path / "got.jsonl")
    result = run_launch(WORKLOAD, got, env=dict(os.environ, SAMPLES_CRASH="1"))
    assert result.returncode != 0, result.stderr
    events = load(got)
    error = [e for e in events if e["event"] == "error"]
    assert len(error) == 1 and error[0]["exc_type"] == "SIGKILL", error
    assert error[0]["samples"] == [["t\u00e2che \u2603", 2 ** 40, -3, 2]]
    assert error[0]["batch_rows"] == 3
    ours, theirs = summaries(got)
    assert ours == theirs
    assert in_flight(ours) == ["documents in flight: t\u00e2che \u2603#1099511627776x1"]


# trixie (3.13, torch 2.6) in the suite; sid (3.14, PGO/LTO, torch 2.14) and bullseye
# (3.9, torch 1.7) with EVMBPF_FULL_MATRIX=1
@pytest.mark.parametrize("chroot", ["trixie"] + (["sid", "bullseye"] if FULL_MATRIX else []))
def test_samples_in_chroot(evmbpf, tmp_path, chroot):
    err = chroot_ensure(chroot)
    if err:
        pytest.fail(f"cannot build the {chroot} chroot: {err}")
    target = chroot_target(chroot).with_outdir(tmp_path)
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    target.reference(WORKLOAD, ref)
    result = target.launch(WORKLOAD, got)
    assert result.returncode == 0, result.stderr
    events = load(got)
    check_workload_shape(events)
    compare_samples(load(ref), events, kwargs=target.kwargs)


# pyenv's CPython 3.10 (co_code's bytes watched) with the stand-in torch; 3.12 with
# EVMBPF_FULL_MATRIX=1
@pytest.mark.parametrize("version", ["3.10"] + (["3.12"] if FULL_MATRIX else []))
def test_samples_on_pyenv(evmbpf, tmp_path, version):
    target = pyenv_target(version)
    if target is None:
        pytest.skip(f"no pyenv CPython {version}")
    target.with_outdir(tmp_path)
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    result = target.reference(WORKLOAD, ref)
    assert result.returncode == 0, result.stderr
    result = target.launch(WORKLOAD, got)
    assert result.returncode == 0, result.stderr
    events = load(got)
    check_workload_shape(events)
    compare_samples(load(ref), events, kwargs=target.kwargs)


def test_stopping_evmbpf_leaves_the_target_running(evmbpf, tmp_path):
    """evmbpf stopped (SIGINT) while it watches note_samples: the target runs on to its
    end, never left stopped, and what was traced carries its batches."""
    got = str(tmp_path / "got.jsonl")
    run = Attached(os.path.join(OWN_WORKLOADS, "samples_loop.py"), got)
    run.release()
    time.sleep(1.5)  # the loop runs 4 s
    assert run.target.poll() is None, "the workload ended before evmbpf was stopped"
    run.tracer.send_signal(signal.SIGINT)
    run.finish(timeout=120)
    assert run.target_rc == 0, run.target_err
    forwards = [e for e in load(got) if e["event"] == "forward"]
    assert len(forwards) > 10
    docs = [e["samples"][0][1] for e in forwards]
    assert forwards[-1]["samples"] == [["mmlu", docs[-1], None, 0],
                                       ["mmlu", docs[-1] + 1, None, 1]]
    assert docs == list(range(docs[0], docs[0] + 2 * len(docs), 2)), docs[:20]
