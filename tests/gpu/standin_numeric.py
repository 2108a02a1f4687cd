"""standin_numeric.py DIR: scripts/gpu/cupti.sh numeric without a GPU. DIR/ncupti.jsonl is
evmbpf --cupti --numeric's trace of tests/workloads/cupti_fake_cuda.py (tensors that read
as cuda:0, the agent reducing them through the stand-in libcuda), DIR/ncupti.out its
output with the EXPECT line (the reference tracer's _tensor_stats of each, computed in
the process). Every such tensor (input_numeric, exit, unwound) must carry those stats:
counts, min, max, median equal; mean and std within 1e-9 relative. One PASS/FAIL line."""
import json
import math
import os
import sys

NAMES = ["strided", "half", "ints", "view"]
OTHERS = ["view", "view", "view", "half"]


def same(ours, want):
    if not ours or set(ours) != set(want):
        return False
    for key, value in want.items():
        if key in ("mean", "std"):
            if value and not math.isclose(ours[key], value, rel_tol=1e-9, abs_tol=0):
                return False
            if not value and abs(ours[key]) >= 1e-12:
                return False
        elif ours[key] != value:
            return False
    return True


def main():
    d = sys.argv[1]
    try:
        with open(os.path.join(d, "ncupti.out")) as handle:
            expect = json.loads(next(l for l in handle if l.startswith("EXPECT "))[7:])
        with open(os.path.join(d, "ncupti.jsonl")) as handle:
            events = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError, StopIteration) as exc:
        print(f"FAIL cupti numeric: cannot read the run's output: {exc!r}")
        return 1
    first = min((e["forward"] for e in events if e.get("event") == "enter"), default=0)
    seen, bad = 0, []
    for e in events:
        f = e.get("forward", first) - first
        if e.get("event") == "input_numeric" and e.get("module") == "sink":
            got, want = e["args"][1].get("stats"), expect[NAMES[f]]
        elif e.get("event") == "exit" and e.get("module") == "sink":
            got, want = (e.get("output") or {}).get("stats"), expect[NAMES[f]]
        elif e.get("event") == "unwound" and e.get("module") == "raiser":
            got, want = e["args"][0].get("stats"), expect[OTHERS[f]]
        elif e.get("event") == "input_numeric" and e.get("module") == "raiser":
            got, want = e["args"][0].get("stats"), expect[OTHERS[f]]
        else:
            continue
        seen += 1
        if not same(got, want):
            bad.append((e["event"], e.get("module"), f, got, want))
    ok = seen == 16 and not bad
    print(f"{'PASS' if ok else 'FAIL'} cupti numeric: {seen} tensors that read as cuda:0 "
          f"(16 wanted), {len(bad)} without the reference's stats (the agent's kernels run "
          f"by the stand-in libcuda)")
    for b in bad[:4]:
        print("  %s %s forward %d: %r, want %r" % b)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
