"""CUDA memory counters (`mem`) read from outside, on a real libc10_cuda.so without a
device: Debian trixie's CUDA build of torch 2.6 (scripts/torch-cuda.sh unpacks it),
loaded beside trixie's CPU torch 2.6, its allocator initialised through its own
init(int) (tests/workloads/cuda_allocator.py). Checks the discovery (the exported
symbol, the RTTI name, the per-device vector, the DeviceStats validation) over real
objects, the header's `cuda` and `mem` against the reference tracer (no device: False
and null), and, with EVMBPF_TEST_ASSUME_CUDA=1 standing in for a device, that every
enter carries the counters of that moment. With the stand-in of the CUDA runtime's device
functions (tests/standin/cudart: a current device per thread, two devices), c10's own
device functions run in that real libc10_cuda.so: threads that set their device before a
--pid attach, and CUDA's lazy init between two module calls. The comparison with
torch.cuda.memory_stats_as_nested_dict() on a real device is scripts/gpu/mem.sh."""
import os
import subprocess

import pytest

from reader_compare import check_all_commands
from evmbpf_testlib import (OWN_WORKLOADS, ROOT, chroot_dir, chroot_target, compare_traces,
                            load, without_machine_notes)

pytestmark = pytest.mark.root  # runs the tracer: loads BPF programs

WORKLOAD = os.path.join(OWN_WORKLOADS, "cuda_allocator.py")
FETCH = os.path.join(ROOT, "scripts", "torch-cuda.sh")
STANDIN_C = os.path.join(ROOT, "tests", "standin", "cudart", "cudart_devices.c")


def expected(k):
    return {"allocated": 512 * (k + 1), "reserved": (1 << 20) * (k + 1),
            "max_allocated": 4096 * (k + 1)}


@pytest.fixture(scope="module")
def torch_cuda():
    if not chroot_dir("trixie") or not os.path.isdir(chroot_dir("trixie")):
        pytest.skip("the trixie chroot is not built (scripts/chroot.sh ensure trixie)")
    r = subprocess.run([FETCH, "ensure"], capture_output=True, text=True, timeout=1800)
    if r.returncode:
        pytest.skip("trixie's CUDA torch (libtorch-cuda-2.6) cannot be had: "
                    + (r.stderr.strip().splitlines() or ["?"])[-1])
    return r.stdout.strip()


def target(tmp_path, torch_cuda, standin=False, **env):
    t = chroot_target("trixie").with_outdir(tmp_path)
    t.env = dict(t.env)
    t.env["EVMBPF_CHROOT_BIND"] += f" {torch_cuda}:/evmbpf/torch-cuda"
    for key in ("EVMBPF_TEST_ASSUME_CUDA", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_ALLOCATOR_INIT",
                "CUDA_ALLOCATOR_POKE", "CUDA_ALLOCATOR_STANDIN", "CUDA_ALLOCATOR_THREADS",
                "CUDA_ALLOCATOR_LAYOUT"):
        t.env.pop(key, None)
    if standin:
        # the runtime's device functions for two devices, built here, seen in the chroot
        # through the bound output folder
        so = tmp_path / "libcudart_devices.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(so), STANDIN_C], check=True)
        t.env["CUDA_ALLOCATOR_STANDIN"] = "/evmbpf/out/libcudart_devices.so"
    t.env.update(env)
    return t


def launched(t, tmp_path, name="launch.jsonl", rc=0):
    out = str(tmp_path / name)
    r = t.launch(WORKLOAD, out)
    assert r.returncode == rc, r.stderr
    return load(out), r.stderr


def attached(t, tmp_path, name="pid.jsonl"):
    out = str(tmp_path / name)
    run = t.attached(WORKLOAD, out)
    run.release()
    run.finish()
    assert run.tracer_rc == 0, run.tracer_err
    assert run.target_rc == 0, run.target_err
    return load(out), run.tracer_err


def enters(events):
    return [e for e in events if e["event"] == "enter"]


def test_no_device_like_the_reference(evmbpf, tmp_path, torch_cuda):
    """Without a device torch.cuda.is_available() is False: cuda false, mem null, even
    with the allocator initialised (the reference never asks it); --pid."""
    t = target(tmp_path, torch_cuda)
    ref = str(tmp_path / "ref.jsonl")
    r = t.reference(WORKLOAD, ref)
    assert r.returncode == 0, r.stderr
    reference = load(ref)
    assert reference[0]["cuda"] is False
    assert all(e["mem"] is None for e in enters(reference)) and enters(reference)
    out = str(tmp_path / "pid.jsonl")
    run = t.attached(WORKLOAD, out)
    doctor = subprocess.run([evmbpf, "doctor", "--pid", str(run.pid)], capture_output=True,
                            text=True, timeout=120)
    run.release()
    run.finish()
    assert run.tracer_rc == 0 and run.target_rc == 0, run.tracer_err + run.target_err
    got = load(out)
    # the chain found over the real objects: two devices, their DeviceStats validated
    assert "CUDA memory: 2 device(s), DeviceStats validated" in doctor.stdout, doctor.stdout
    assert "no device is visible" in doctor.stdout, doctor.stdout
    compare_traces(reference, got, kwargs=t.kwargs)
    assert got[0]["cuda"] is False
    assert [e["mem"] for e in enters(got)] == [None] * len(enters(reference))


@pytest.mark.parametrize("mode", ["pid", "launch"])
def test_counters_at_every_enter(evmbpf, tmp_path, torch_cuda, monkeypatch, mode):
    """The allocator's DeviceStats as they are at each call: --pid, initialised before
    the attach (right from its first event); launched, initialised after the probes were
    placed (the first call, held, sees it)."""
    monkeypatch.setenv("EVMBPF_TEST_ASSUME_CUDA", "1")  # the tracer's, for --pid
    t = target(tmp_path, torch_cuda, standin=True, EVMBPF_TEST_ASSUME_CUDA="1",
               CUDA_ALLOCATOR_POKE="1", CUDA_ALLOCATOR_INIT="build" if mode == "pid" else "run")
    if mode == "launch":
        t.env["CUDA_ALLOCATOR_RAISE"] = "1"  # and an error event at the end
    got, err = attached(t, tmp_path) if mode == "pid" else launched(t, tmp_path, rc=1)
    assert got[0]["cuda"] is True
    ev = enters(got)
    assert len(ev) == 4 * 7, [e["module"] for e in ev]
    assert [e["mem"] for e in ev] == [expected(e["forward"] - 1) for e in ev], err
    assert "warning" not in without_machine_notes(err), err
    if mode == "launch":
        error = [e for e in got if e["event"] == "error"]
        assert len(error) == 1 and error[0]["mem"] == expected(3), error
    # the readers print these mem as the reference's reader does
    path = str(tmp_path / ("pid.jsonl" if mode == "pid" else "launch.jsonl"))
    check_all_commands(path)


def test_malloc_async_backend(evmbpf, tmp_path, torch_cuda):
    """cudaMallocAsync keeps no such counters: null, and one warning naming it."""
    t = target(tmp_path, torch_cuda, EVMBPF_TEST_ASSUME_CUDA="1", CUDA_ALLOCATOR_INIT="none",
               PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    got, err = launched(t, tmp_path)
    assert all(e["mem"] is None for e in enters(got)) and enters(got)
    warnings = [line for line in err.splitlines() if "warning: CUDA memory" in line]
    assert len(warnings) == 1 and "cudaMallocAsync" in warnings[0], err


def test_layout_that_does_not_validate(evmbpf, tmp_path, torch_cuda, monkeypatch):
    """DeviceStats whose pools do not add up are not read: null and one warning, no guess."""
    monkeypatch.setenv("EVMBPF_TEST_ASSUME_CUDA", "1")
    t = target(tmp_path, torch_cuda, EVMBPF_TEST_ASSUME_CUDA="1", CUDA_ALLOCATOR_POKE="bad")
    got, err = attached(t, tmp_path)
    assert all(e["mem"] is None for e in enters(got)) and enters(got)
    warnings = [line for line in err.splitlines() if "warning: CUDA memory" in line]
    assert len(warnings) == 1 and "layout" in warnings[0], err


def test_vtable_first_layout(evmbpf, tmp_path, torch_cuda, monkeypatch):
    """Device allocators that start with a vtable pointer (a polymorphic allocator
    class: the mutex and DeviceStats 8 bytes later) are read when their DeviceStats
    validate the same way: every enter carries the counters of that moment."""
    monkeypatch.setenv("EVMBPF_TEST_ASSUME_CUDA", "1")
    t = target(tmp_path, torch_cuda, standin=True, EVMBPF_TEST_ASSUME_CUDA="1",
               CUDA_ALLOCATOR_POKE="1", CUDA_ALLOCATOR_LAYOUT="vtable")
    got, err = attached(t, tmp_path)
    ev = enters(got)
    assert len(ev) == 4 * 7, [e["module"] for e in ev]
    assert [e["mem"] for e in ev] == [expected(e["forward"] - 1) for e in ev], err
    assert "warning: CUDA memory" not in err, err


@pytest.mark.parametrize("mode", ["launch", "linger"])
def test_initialised_but_no_layout_validates(evmbpf, tmp_path, torch_cuda, mode):
    """CUDA's lazy init seen (device_count_ensure_non_zero), and the allocator's vector
    holds nothing of a layout evmbpf knows: one warning, not a silent null; said at the
    held module call after the init, and (the target may not be stopped: a run that
    lingers, --numeric) at a poll a second after the init."""
    env = dict(EVMBPF_TEST_ASSUME_CUDA="1", CUDA_ALLOCATOR_INIT="run", CUDA_ALLOCATOR_LAYOUT="alien")
    if mode == "linger":
        env.update(CUDA_ALLOCATOR_SETTLE="1.5")
    t = target(tmp_path, torch_cuda, standin=True, **env)
    got, err = launched(t, tmp_path)
    assert all(e["mem"] is None for e in enters(got)) and enters(got)
    warnings = [line for line in err.splitlines() if "warning: CUDA memory" in line]
    assert len(warnings) == 1 and "CUDA was initialised" in warnings[0] and \
        "layout evmbpf knows" in warnings[0], err


def device(d):
    allocated, peak, reserved = 1000 * (d + 1), 3000 * (d + 1), (1 << 21) * (d + 1)
    return {"allocated": allocated, "reserved": reserved, "max_allocated": peak}


def test_devices_set_before_the_attach(evmbpf, tmp_path, torch_cuda, monkeypatch):
    """Threads that set device 1 (c10::cuda::SetDevice) before a --pid attach get device
    1's counters once c10::cuda::GetDevice has told their device (as every CUDA operation
    asks it); the main thread, there before too, device 0's; a module call of a thread
    not seen since the attach has `mem` null, with one warning, never device 0's."""
    monkeypatch.setenv("EVMBPF_TEST_ASSUME_CUDA", "1")
    t = target(tmp_path, torch_cuda, standin=True, EVMBPF_TEST_ASSUME_CUDA="1",
               CUDA_ALLOCATOR_THREADS="1")
    got, err = attached(t, tmp_path)
    ev = enters(got)
    assert len(ev) == 4 * 7, [e["module"] for e in ev]
    want = {1: device(0), 2: device(1), 3: None, 4: device(1)}
    assert [e["mem"] for e in ev] == [want[e["forward"]] for e in ev], err
    warnings = [line for line in err.splitlines() if "warning: CUDA memory" in line]
    assert len(warnings) == 1 and "before evmbpf" in warnings[0], err


@pytest.mark.parametrize("mode", ["pid", "launch"])
def test_init_between_two_calls(evmbpf, tmp_path, torch_cuda, monkeypatch, mode):
    """CUDA's lazy init (device_count_ensure_non_zero, then the allocator's init) just
    before a module call, after the first one: that call already carries the counters
    (the target stops there until the devices are found), not 100 ms later."""
    monkeypatch.setenv("EVMBPF_TEST_ASSUME_CUDA", "1")
    t = target(tmp_path, torch_cuda, standin=True, EVMBPF_TEST_ASSUME_CUDA="1",
               CUDA_ALLOCATOR_POKE="1", CUDA_ALLOCATOR_INIT="between")
    got, err = attached(t, tmp_path) if mode == "pid" else launched(t, tmp_path)
    ev = enters(got)
    assert len(ev) == 4 * 7, [e["module"] for e in ev]
    assert [e["mem"] for e in ev] == [
        None if e["forward"] == 1 else expected(e["forward"] - 1) for e in ev], err
    assert "warning" not in without_machine_notes(err), err
