"""check_cupti_time.py DIR REF: scripts/gpu/cupti.sh time's verdicts on the runs in DIR
(plain, nocupti, cupti, cnum and, with the reference tracer REF, ref and refnum: each
NAME.out with the workload's CUPTI_WORKLOAD line, NAME.jsonl the trace); PASS/FAIL lines
and figures."""
import json, os, sys
T, REF = sys.argv[1], sys.argv[2]
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()]
def fig(name):
    for line in open(os.path.join(T, name + ".out")):
        if line.startswith("CUPTI_WORKLOAD "):
            return json.loads(line.split(" ", 1)[1])
def check(ok, what):
    print(("PASS" if ok else "FAIL") + " cupti: " + what)
ev = load(os.path.join(T, "cupti.jsonl"))
plain = load(os.path.join(T, "nocupti.jsonl"))
mods = lambda es: [(e["event"], e.get("module"), e.get("call")) for e in es
                   if e["event"] in ("enter", "exit")]
check(mods(ev) == mods(plain), "the module trace with --cupti is the one without (%d events)" % len(mods(ev)))
summ = [e for e in ev if e["event"] == "gpu_summary"]
check(len(summ) == 1, "one gpu_summary")
if summ:
    s = summ[0]
    calls = [e for e in ev if e["event"] == "gpu"]
    own = sum(e["self_gpu_ns"] for e in calls)
    check(s["kernels"] > 0, "kernels seen: %d, %.3f ms of GPU time, %d copies (%d bytes), %d sets, %d lost"
          % (s["kernels"], s["gpu_ns"] / 1e6, s["memcpy"], s["memcpy_bytes"], s["memset"], s["dropped"]))
    check(own + s["unattributed_gpu_ns"] == s["gpu_ns"],
          "module calls' own GPU time (%d ns) + unattributed (%d ns) = the CUPTI kernel total (%d ns)"
          % (own, s["unattributed_gpu_ns"], s["gpu_ns"]))
    head = ev[0].get("tracer", {}).get("cupti")
    if head is not None:
        check(head == s.get("cupti"), "the trace header names the libcupti the agent took, as "
              "gpu_summary does: %s" % json.dumps(head))
    else:
        print("  the header names no libcupti (the agent started after the first module "
              "call); gpu_summary's: %s" % json.dumps(s.get("cupti")))
    roots = [e for e in calls if e["module"] == "<root>"]
    check(sum(e["gpu_ns"] for e in roots) + s["unattributed_gpu_ns"] == s["gpu_ns"],
          "the forwards' GPU times (%d roots) + unattributed = the total" % len(roots))
    check(s["unattributed_kernels"] <= s["kernels"] // 10,
          "%d of %d kernels launched outside any module call" % (s["unattributed_kernels"], s["kernels"]))
    by = {}
    for e in calls:
        by.setdefault(e["module"], [0, 0])
        by[e["module"]][0] += e["self_kernels"]; by[e["module"]][1] += e["self_gpu_ns"]
    for m, (k, ns) in sorted(by.items(), key=lambda kv: -kv[1][1])[:8]:
        print("  %-24s %5d kernels %10.3f ms own GPU time" % (m, k, ns / 1e6))
mem = [e for e in ev if e["event"] == "gpu_mem"]
print("  gpu_mem events: %d (%s)" % (len(mem), ", ".join(sorted({e["op"] for e in mem}))))
a, b, cn = fig("nocupti"), fig("cupti"), fig("cnum")
check(a and b and a["max_memory_allocated"] == b["max_memory_allocated"],
      "max_memory_allocated unchanged by the agent: %s vs %s" % (a and a["max_memory_allocated"], b and b["max_memory_allocated"]))
check(a and cn and a["max_memory_allocated"] == cn["max_memory_allocated"],
      "max_memory_allocated unchanged by the agent with --numeric: %s vs %s"
      % (a and a["max_memory_allocated"], cn and cn["max_memory_allocated"]))
n = len([e for e in ev if e["event"] == "enter"])
p = fig("plain")
rows = [("untraced", p), ("evmbpf", a), ("evmbpf --cupti", b), ("evmbpf --cupti --numeric", cn)]
if REF:
    rows += [("reference", fig("ref")), ("reference --numeric", fig("refnum"))]
for name, f in rows:
    if f and p:
        print("  %-22s run %.3f s, %+.1f us per module call (%d calls)"
              % (name, f["run_s"], (f["run_s"] - p["run_s"]) / max(n, 1) * 1e6, n))
