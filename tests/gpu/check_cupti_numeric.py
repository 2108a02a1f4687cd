"""check_cupti_numeric.py DIR REF: scripts/gpu/cupti.sh numeric's verdicts: every CUDA
tensor of DIR/ncupti.jsonl (--cupti --numeric) described with stats, equal to the
reference tracer's --numeric run (DIR/nref.jsonl) when REF is given; the GPU times
adding up; max_memory_allocated unchanged by the agent (nplain.out, ncupti.out)."""
import json, math, os, sys
T, REF = sys.argv[1], sys.argv[2]
def check(ok, what):
    print(("PASS" if ok else "FAIL") + " cupti numeric: " + what)
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
def fig(name):
    p = os.path.join(T, name + ".out")
    for line in open(p) if os.path.exists(p) else []:
        if line.startswith("CUPTI_WORKLOAD "):
            return json.loads(line.split(" ", 1)[1])
def tensors(d, path=()):
    if isinstance(d, dict):
        if "shape" in d and "dtype" in d and "device" in d:
            yield path, d
            return
        for k in sorted(d):
            yield from tensors(d[k], path + (k,))
    elif isinstance(d, list):
        for k, item in enumerate(d):
            yield from tensors(item, path + (k,))
def described(events):
    out = {}
    for e in events:
        if e.get("event") == "input_numeric":
            out[("input", e["call"])] = {"args": e["args"], "kwargs": e["kwargs"]}
        elif e.get("event") == "exit" and e.get("call") is not None:
            out[("output", e["call"])] = e.get("output")
    return out
ours = load(os.path.join(T, "ncupti.jsonl"))
a, b = fig("nplain"), fig("ncupti")
check(a and b and a["max_memory_allocated"] == b["max_memory_allocated"],
      "max_memory_allocated unchanged by the agent: %s vs %s"
      % (a and a["max_memory_allocated"], b and b["max_memory_allocated"]))
s = [e for e in ours if e.get("event") == "gpu_summary"]
if s:
    s = s[0]
    own = sum(e["self_gpu_ns"] for e in ours if e.get("event") == "gpu")
    check(own + s["unattributed_gpu_ns"] == s["gpu_ns"],
          "module calls' own GPU time + unattributed = the job's kernel total (%d ns); the "
          "agent's reductions apart: %d kernels, %.3f ms" % (s["gpu_ns"], s.get("numeric_kernels", 0),
                                                            s.get("numeric_gpu_ns", 0) / 1e6))
mine = [t for _, d in described(ours).items() for _, t in tensors(d) if t["device"].startswith("cuda")]
check(mine and all("stats" in t for t in mine),
      "%d of %d CUDA tensors described with stats" % (sum("stats" in t for t in mine), len(mine)))
if not REF:
    print("SKIP cupti numeric: no reference tracer here (EVMBPF_REFERENCE=DIR): stats not compared")
    sys.exit(0)
ref = described(load(os.path.join(T, "nref.jsonl")))
got = described(ours)
check(set(ref) == set(got), "the same calls described (%d)" % len(ref))
bad, compared, kinds = [], 0, set()
for key in sorted(ref, key=str):
    rt = dict(tensors(ref[key]))
    gt = dict(tensors(got.get(key)))
    for path, r in rt.items():
        if not r["device"].startswith("cuda"):
            continue
        g = gt.get(path)
        kinds.add(r["dtype"])
        compared += 1
        if not g or "stats" not in g or set(g["stats"]) != set(r["stats"]):
            bad.append((key, path, r.get("stats"), g and g.get("stats")))
            continue
        for k, v in r["stats"].items():
            w = g["stats"][k]
            same = (math.isclose(w, v, rel_tol=1e-9, abs_tol=1e-300) if k in ("mean", "std") and v
                    else (abs(w) < 1e-12 if k in ("mean", "std") else w == v))
            if not same:
                bad.append((key, path, k, v, w))
check(compared and not bad, "%d CUDA tensors' stats equal to the reference's (dtypes %s)%s"
      % (compared, ", ".join(sorted(kinds)), "; first differences: %r" % bad[:5] if bad else ""))
rows = [("untraced", fig("nplain")), ("evmbpf --cupti --numeric", b)]
if REF:
    rows.append(("reference --numeric", fig("nref")))
n = len([e for e in ours if e.get("event") == "enter"])
for name, f in rows:
    if f and a:
        print("  %-26s run %.3f s, %+.1f us per module call (%d calls)"
              % (name, f["run_s"], (f["run_s"] - a["run_s"]) / max(n, 1) * 1e6, n))
