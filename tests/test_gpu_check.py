"""scripts/gpu-check.sh, the GPU machine's one script, run end to end here with its
stand-ins (--stand-in: no GPU): the facts first, each check in its own folder with its own
verdict line, the summary, the exit status. Each check passes where its stand-in is here
(the CUPTI headers for the stand-in libcuda/libcupti; the trixie chroot and torch 2.6's
CUDA libc10_cuda.so for the allocator), else says why it is skipped."""
import os
import re
import subprocess

import pytest

from evmbpf_testlib import ROOT, chroot_dir

pytestmark = pytest.mark.root

SCRIPT = os.path.join(ROOT, "scripts", "gpu-check.sh")
BUNDLE = os.path.join(ROOT, "build", "evmbpf-gpu")
CHECKS = ["mem-launch", "mem-pid", "mem-expandable", "cupti-time", "cupti-numeric"]


def _have_mem_standin():
    torch_cuda = subprocess.run([os.path.join(ROOT, "scripts", "torch-cuda.sh"), "path"],
                                capture_output=True, text=True).stdout.strip()
    return bool(chroot_dir("trixie")) and os.path.exists(
        os.path.join(torch_cuda, "lib", "libc10_cuda.so.2.6"))


def _have_cupti_standin():
    inc = subprocess.run([os.path.join(ROOT, "scripts", "cupti-headers.sh"), "path"],
                         capture_output=True, text=True).stdout.strip()
    return os.path.exists(os.path.join(BUNDLE, "evmbpf-cupti.so")) and any(
        os.path.exists(os.path.join(d, "cupti.h")) and os.path.exists(os.path.join(d, "cuda.h"))
        for d in ("/usr/local/cuda/include", inc))


@pytest.fixture(scope="module")
def bundle():
    if not os.access(os.path.join(BUNDLE, "evmbpf"), os.X_OK):
        r = subprocess.run(["make", "-s", "-j2", "static"], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, f"make static failed:\n{r.stderr[-3000:]}"
    return BUNDLE


def test_gpu_check_runs_every_check_with_the_stand_ins(bundle, tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), EVMBPF=os.path.join(bundle, "evmbpf"))
    for key in ("EVMBPF_GPU_STANDIN", "CUDA_INJECTION64_PATH", "EVMBPF_CUPTI_LIB",
                "EVMBPF_CUDA_LIB", "EVMBPF_TEST_INJECT", "PYTHON", "CHECK_DIR"):
        env.pop(key, None)
    got = subprocess.run([SCRIPT, "--stand-in"], capture_output=True, text=True, env=env,
                         timeout=480)
    text = got.stdout
    # the facts first
    facts = (out / "facts.txt").read_text()
    for key in ("kernel:", "driver:", "python:", "libcupti:", "hypervisor:", "BPF works: yes",
                "doctor --pid: "):
        assert key in facts, facts
    assert re.search(r"^doctor: [✓✗·] hardware breakpoints:", facts, re.M), facts
    assert text.index("BPF works:") < text.index("== mem-launch")
    # one verdict per check, in order, each as its check ended, each with its folder
    verdicts = re.findall(r"^(PASS|FAIL|SKIP) ([a-z-]+): (.*)$", text[:text.index("== summary")],
                          re.M)
    assert [v[1] for v in verdicts] == CHECKS, text
    want_pass = {c: (_have_mem_standin() if c.startswith("mem") else _have_cupti_standin())
                 for c in CHECKS}
    for mark, check, why in verdicts:
        assert (out / check / "log").exists(), check
        if want_pass[check]:
            assert mark == "PASS", (check, why, (out / check / "log").read_text()[-3000:])
            assert str(out / check) in why
        else:
            assert mark == "SKIP" and why, (check, why)
        # its verdict before the next check begins
        nxt = CHECKS.index(check) + 1
        assert text.index(f"{mark} {check}:") < text.index(
            f"== {CHECKS[nxt]}:" if nxt < len(CHECKS) else "== summary")
    # the summary at the end, kept in the output folder too
    summary = text[text.index("== summary"):]
    for mark, check, why in verdicts:
        assert f"{mark} {check}: {why}" in summary
    counts = "%d PASS, 0 FAIL, %d SKIP" % (sum(v[0] == "PASS" for v in verdicts),
                                          sum(v[0] == "SKIP" for v in verdicts))
    assert summary.rstrip().endswith(counts), summary
    assert (out / "summary.txt").read_text().rstrip().endswith(counts)
    assert got.returncode == 0, text + got.stderr
    # the checks' own lines: the allocator's counters at every enter, the kernels'
    # GPU time adding up, the stats of the tensors that read as CUDA ones
    if want_pass["cupti-time"]:
        log = (out / "cupti-time" / "log").read_text()
        assert "PASS cupti: module calls' own GPU time (6000 ns) + unattributed (0 ns)" in log
    if want_pass["mem-pid"]:
        assert "PASS mem plain (pid): 28 enters, 0 without" in (out / "mem-pid" / "log").read_text()


def test_gpu_check_says_a_failure_and_exits_1(bundle, tmp_path):
    """A check that cannot run (no evmbpf where it is said to be) is a FAIL line, the
    summary counts it, and the exit status is 1; an unknown check is refused."""
    env = dict(os.environ, OUT=str(tmp_path), EVMBPF=str(tmp_path / "nothing"))
    got = subprocess.run([SCRIPT, "--stand-in", "cupti-numeric"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert got.returncode == 1, got.stdout + got.stderr
    assert re.search(r"^FAIL cupti-numeric: no .*nothing", got.stdout, re.M), got.stdout
    assert got.stdout.rstrip().endswith("0 PASS, 1 FAIL, 0 SKIP")
    got = subprocess.run([SCRIPT, "nope"], capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode == 2 and "no check nope" in got.stderr
