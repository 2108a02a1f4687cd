#!/usr/bin/python3
"""The BPF cost of `mem` per module call: call_enter's run_time_ns / run_cnt
(kernel.bpf_stats_enabled=1 for the run) on tests/workloads/cuda_allocator.py in the
trixie chroot (trixie's real libc10_cuda.so, scripts/torch-cuda.sh), launched, with the
allocator found and read at every call (EVMBPF_TEST_ASSUME_CUDA=1) and without (cuda
false: nothing read). Each mode runs ROUNDS times, alternating; prints the figures.

    scripts/bench_cudamem.py [FORWARDS [ROUNDS]]"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench import bpf_prog_stats  # noqa: E402


def one(assume, forwards, lib):
    env = dict(os.environ, CUDA_ALLOCATOR_FORWARDS=str(forwards), CUDA_ALLOCATOR_LINGER="3",
               EVMBPF_CHROOT_BIND=f"{lib}:/evmbpf/torch-cuda")
    env.pop("EVMBPF_TEST_ASSUME_CUDA", None)
    if assume:
        env["EVMBPF_TEST_ASSUME_CUDA"] = "1"
    out = f"/tmp/bench_cudamem.{os.getpid()}.jsonl"
    if os.path.exists(out):
        os.unlink(out)
    p = subprocess.Popen([os.path.join(ROOT, "build", "evmbpf"), "-q", "--out", out, "--",
                          os.path.join(HERE, "chroot.sh"), "run", "trixie", "python3",
                          "/evmbpf/shared/reference/run_workload.py",
                          "/evmbpf/main/tests/workloads/cuda_allocator.py"],
                         env=env, stderr=subprocess.PIPE, text=True)
    want = forwards * 7
    best = None
    while p.poll() is None:
        st = bpf_prog_stats(p.pid).get("call_enter")
        if st and st["run_cnt"]:
            best = st  # the last figures before the tracer exits
        if st and st["run_cnt"] >= want:
            break
        time.sleep(0.2)
    p.communicate(timeout=120)
    with open(out) as f:
        mems = sum(1 for line in f if '"event": "enter"' in line and '"mem": {' in line)
    os.unlink(out)
    return best, mems


def main():
    forwards = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    lib = subprocess.run([os.path.join(HERE, "torch-cuda.sh"), "ensure"], capture_output=True,
                         text=True, check=True).stdout.strip()
    path = "/proc/sys/kernel/bpf_stats_enabled"
    old = open(path).read().strip()
    with open(path, "w") as f:
        f.write("1")
    try:
        res = {0: [], 1: []}
        for _ in range(rounds):
            for assume in (0, 1):
                st, mems = one(assume, forwards, lib)
                if st:
                    res[assume].append(st["ns_per_run"])
                print(f"{'mem read' if assume else 'no mem  '}: call_enter "
                      f"{st['ns_per_run'] if st else float('nan'):.0f} ns/run over "
                      f"{st['run_cnt'] if st else 0} runs, {mems} enters with mem", flush=True)
        for assume in (0, 1):
            v = sorted(res[assume])
            if v:
                print(f"{'mem read' if assume else 'no mem  '}: median {v[len(v) // 2]:.0f} ns "
                      f"per module call (of {len(v)} runs)")
    finally:
        with open(path, "w") as f:
            f.write(old)


if __name__ == "__main__":
    main()
