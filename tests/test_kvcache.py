"""KV caches read in few reads (bpf/kvcache.bpf.h): layers of two classes, layers changed
in place, dicts made, keys deleted and reassigned, in the 3.13 and 3.14 chroots (where a
layer's inline values are read in one go), launched and attached, against the reference
tracer."""
import os

import pytest

from evmbpf_testlib import OWN_WORKLOADS, chroot_reference, compare_traces, load

pytestmark = pytest.mark.root  # runs the tracer: loads BPF programs

WORKLOAD = os.path.join(OWN_WORKLOADS, "kv_cache_layers.py")


@pytest.mark.parametrize("chroot", ["trixie", "sid"])
def test_kv_cache_layers(evmbpf, tmp_path, chroot):
    target, ref, reference = chroot_reference(chroot, tmp_path, WORKLOAD)
    text = open(ref).read()
    assert '"layers": 4' in text and '"layers": 0' in text
    out = str(tmp_path / "launch.jsonl")
    result = target.launch(WORKLOAD, out)
    assert result.returncode == 0, result.stderr
    compare_traces(reference, load(out), kwargs=target.kwargs)
    out = str(tmp_path / "pid.jsonl")
    run = target.attached(WORKLOAD, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    compare_traces(reference, load(out), kwargs=target.kwargs)
