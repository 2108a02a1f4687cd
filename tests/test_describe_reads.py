"""Descriptions read in few reads (bpf/values.bpf.h: an object's head in one read, a
container's items and a dict's entries through a window per cursor): values wider than
the head and the windows, dicts with deleted entries and grown tables, tuple keys, against
the reference tracer, on the host's Python (3.11) and in the chroots (3.9, 3.14)."""
import os

import pytest

from evmbpf_testlib import (OWN_WORKLOADS, chroot_reference, compare_traces, load,
                            run_launch, run_reference, host_kwargs)

pytestmark = pytest.mark.root  # runs the tracer: loads BPF programs

WORKLOAD = os.path.join(OWN_WORKLOADS, "wide_values.py")
KWARGS = host_kwargs()


def test_wide_values_host(evmbpf, tmp_path):
    ref = str(tmp_path / "ref.jsonl")
    run_reference(WORKLOAD, ref)
    reference = load(ref)
    text = open(ref).read()
    assert '"value": 29' in text and '"len": 30' in text
    assert "(2, (3, 4))" in text and "((1, (2, ('a', None))),)" in text
    out = str(tmp_path / "launch.jsonl")
    result = run_launch(WORKLOAD, out)
    assert result.returncode == 0, result.stderr
    compare_traces(reference, load(out), kwargs=KWARGS)


@pytest.mark.parametrize("chroot", ["bullseye", "sid"])
def test_wide_values_chroot(evmbpf, tmp_path, chroot):
    target, ref, reference = chroot_reference(chroot, tmp_path, WORKLOAD)
    text = open(ref).read()
    assert "(2, (3, 4))" in text  # a tuple inside a key's tuple, at any depth
    if target.kwargs:
        assert '"key_29"' in text
    out = str(tmp_path / "launch.jsonl")
    result = target.launch(WORKLOAD, out)
    assert result.returncode == 0, result.stderr
    compare_traces(reference, load(out), kwargs=target.kwargs)
