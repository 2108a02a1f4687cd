"""compare_mem.py REF EVMBPF NAME STDERR: `mem` of every enter and error event of
evmbpf's trace against the reference's trace of the same run, field by field; prints
PASS/FAIL lines and figures. The reference (run_workload.py --trace) and evmbpf traced
the same process, so events pair by (event, module, forward, call)."""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def key(e):
    return (e["event"], e.get("module"), e.get("forward"), e.get("call"))


def main():
    ref_path, got_path, name, err_path = sys.argv[1:5]
    try:
        ref, got = load(ref_path), load(got_path)
    except (OSError, ValueError) as exc:
        print(f"FAIL mem {name}: cannot read the traces: {exc}")
        print(open(err_path).read()[-2000:] if err_path else "")
        return 1
    err = open(err_path).read()
    warnings = [l for l in err.splitlines() if "warning: CUDA memory" in l]
    wanted = [e for e in ref if e["event"] in ("enter", "error")]
    have = {key(e): e for e in got if e["event"] in ("enter", "error")}
    header_ok = got[0].get("cuda") == ref[0].get("cuda")
    if name.startswith("async"):
        nulls = all(e.get("mem") is None for e in have.values())
        ok = nulls and len(warnings) == 1 and "cudaMallocAsync" in warnings[0]
        ref_vals = sum(1 for e in wanted if e.get("mem"))
        print(f"{'PASS' if ok else 'FAIL'} mem {name}: evmbpf null on {len(have)} events, "
              f"{len(warnings)} warning(s); the reference has counters on {ref_vals} of "
              f"{len(wanted)} (its getDeviceStats of the async pool)")
        return 0 if ok else 1
    diffs, missing = [], 0
    for e in wanted:
        g = have.get(key(e))
        if g is None:
            missing += 1
            continue
        if g.get("mem") != e.get("mem"):
            diffs.append((e, g))
    withmem = sum(1 for e in wanted if e.get("mem"))
    ok = not diffs and not missing and header_ok and not warnings
    print(f"{'PASS' if ok else 'FAIL'} mem {name}: {len(wanted)} events ({withmem} with counters), "
          f"{len(diffs)} differ, {missing} missing, header cuda {got[0].get('cuda')} "
          f"(reference {ref[0].get('cuda')}), {len(warnings)} warning(s)")
    for e, g in diffs[:8]:
        print(f"  {e['event']} {e.get('module')} forward {e.get('forward')} call {e.get('call')}: "
              f"reference {e.get('mem')} evmbpf {g.get('mem')}")
    for w in warnings:
        print("  " + w)
    if not ok and (missing or not got):
        print(err[-1500:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
