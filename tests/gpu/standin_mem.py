"""standin_mem.py TRACE NAME STDERR: scripts/gpu/mem.sh's check without a GPU. The trace
is of tests/workloads/cuda_allocator.py with CUDA_ALLOCATOR_POKE=1 (its counters set
before each forward k to 512 (k+1) allocated, 1 MiB (k+1) reserved, 4096 (k+1) peak):
the header's cuda is true, every enter carries the counters of its forward, and no CUDA
memory warning was said. Prints one PASS/FAIL line."""
import json
import sys


def main():
    path, name, err_path = sys.argv[1:4]
    try:
        with open(path) as handle:
            events = [json.loads(line) for line in handle if line.strip()]
        with open(err_path) as handle:
            err = handle.read()
    except (OSError, ValueError) as exc:
        print(f"FAIL mem {name}: cannot read the trace: {exc}")
        return 1
    enters = [e for e in events if e.get("event") == "enter"]
    warnings = [l for l in err.splitlines() if "warning: CUDA memory" in l]
    if not enters:
        print(f"FAIL mem {name}: no module call in the trace")
        print(err[-1500:])
        return 1
    first = min(e["forward"] for e in enters)
    bad = []
    for e in enters:
        k = e["forward"] - first
        want = {"allocated": 512 * (k + 1), "reserved": (1 << 20) * (k + 1),
                "max_allocated": 4096 * (k + 1)}
        if e.get("mem") != want:
            bad.append((e["module"], e["forward"], e.get("mem"), want))
    ok = events[0].get("cuda") is True and not bad and not warnings
    print(f"{'PASS' if ok else 'FAIL'} mem {name}: {len(enters)} enters, {len(bad)} without "
          f"the counters of their forward, header cuda {events[0].get('cuda')}, "
          f"{len(warnings)} warning(s)")
    for b in bad[:5]:
        print("  %s forward %s: mem %s, want %s" % b)
    for w in warnings:
        print("  " + w)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
