#!/usr/bin/env bash
# --cupti on the GPU machine (called by scripts/gpu-check.sh; a few minutes):
# tests/gpu/cupti_workload.py traced with --cupti; PASS/FAIL lines and figures:
# - the agent loaded and kernels were seen; each module call's own GPU time plus what no
#   module launched adds up to the CUPTI kernel total (gpu_summary);
# - the module trace is the one without --cupti (same events);
# - torch.cuda.max_memory_allocated() of the job is the same with and without the agent;
# - the cost per module call with and without the agent, with --numeric too (and the
#   reference's numeric mode next to them when ../shared/reference or $EVMBPF_REFERENCE
#   is there);
# - --cupti --numeric on tests/gpu/cupti_numeric_workload.py (every dtype, strided views,
#   NaN/Inf, a side stream): the stats of every CUDA tensor against the reference
#   tracer's --numeric run (counts, min, max, median equal; mean and std within 1e-9
#   relative), GPU times adding up with the agent's own kernels apart, and
#   max_memory_allocated() unchanged by the agent.
# Needs build/evmbpf-gpu/ (make static: the static evmbpf and evmbpf-cupti.so, built
# against CUDA 12's or 13's headers: it reads either major's libcupti,
# agent/cupti_layout.h), or build/evmbpf-static and build/evmbpf-cupti.so.
set -uo pipefail
cd "$(dirname "$0")/../.."
# the folder `make static` makes (the static evmbpf, its agent beside it), else the two
# files of build/
[ -x build/evmbpf-gpu/evmbpf ] && : "${EVMBPF:=build/evmbpf-gpu/evmbpf}"
EVMBPF=${EVMBPF:-build/evmbpf-static}
PY=${PYTHON:-python3}
W=tests/gpu/cupti_workload.py
REF=${EVMBPF_REFERENCE:-}
for d in build/reference ../shared/reference shared/reference; do
	[ -z "$REF" ] && [ -f "$d/run_workload.py" ] && REF=$d
done
T=$(mktemp -d)
[ -x "$EVMBPF" ] || { echo "FAIL cupti: no $EVMBPF (make static; carry it)"; exit 0; }
[ -f "$(dirname "$EVMBPF")/evmbpf-cupti.so" ] || { echo "FAIL cupti: no evmbpf-cupti.so beside $EVMBPF (make static; carry build/evmbpf-gpu)"; exit 0; }
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
	{ echo "SKIP cupti: torch sees no CUDA device"; exit 0; }
if [ -n "$REF" ]; then HARNESS="$REF/run_workload.py"; else
	# the reference's harness is not here: a plain one (build, no_grad, run)
	HARNESS=$T/harness.py
	cat > "$HARNESS" <<'PY'
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("w", sys.argv[1]); w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w); torch.manual_seed(0)
with torch.no_grad(): w.run(w.build())
PY
fi
figure() { sed -n 's/^CUPTI_WORKLOAD //p' "$1" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }

"$PY" "$HARNESS" "$W" > "$T/plain.out" 2>&1 || { echo "FAIL cupti: the workload fails alone"; tail -5 "$T/plain.out"; exit 0; }
"$EVMBPF" --out "$T/nocupti.jsonl" -- "$PY" "$HARNESS" "$W" > "$T/nocupti.out" 2> "$T/nocupti.err" ||
	{ echo "FAIL cupti: evmbpf without --cupti"; tail -5 "$T/nocupti.err"; exit 0; }
"$EVMBPF" --cupti -v --out "$T/cupti.jsonl" -- "$PY" "$HARNESS" "$W" > "$T/cupti.out" 2> "$T/cupti.err" ||
	{ echo "FAIL cupti: evmbpf --cupti"; tail -5 "$T/cupti.err"; exit 0; }
"$EVMBPF" --cupti --numeric -v --out "$T/cnum.jsonl" -- "$PY" "$HARNESS" "$W" > "$T/cnum.out" 2> "$T/cnum.err" ||
	{ echo "FAIL cupti: evmbpf --cupti --numeric"; tail -5 "$T/cnum.err"; }
grep -- '--cupti' "$T/cupti.err" | sed 's/^/  /'
if [ -n "$REF" ]; then
	"$PY" "$HARNESS" "$W" --trace "$T/ref.jsonl" > "$T/ref.out" 2>&1 || echo "FAIL cupti: the reference tracer"
	"$PY" "$HARNESS" "$W" --trace "$T/refnum.jsonl" --numeric > "$T/refnum.out" 2>&1 || echo "FAIL cupti: the reference's numeric mode"
fi

"$PY" - "$T" "$REF" <<'PY'
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
PY

# --numeric: every CUDA tensor's stats against the reference tracer's
NW=tests/gpu/cupti_numeric_workload.py
"$PY" "$HARNESS" "$NW" > "$T/nplain.out" 2>&1 || { echo "FAIL cupti numeric: the workload fails alone"; tail -5 "$T/nplain.out"; }
"$EVMBPF" --cupti --numeric -v --out "$T/ncupti.jsonl" -- "$PY" "$HARNESS" "$NW" > "$T/ncupti.out" 2> "$T/ncupti.err" ||
	{ echo "FAIL cupti numeric: evmbpf --cupti --numeric"; tail -5 "$T/ncupti.err"; }
grep -- '--numeric\|--cupti' "$T/ncupti.err" | sed 's/^/  /'
[ -n "$REF" ] && { "$PY" "$HARNESS" "$NW" --trace "$T/nref.jsonl" --numeric > "$T/nref.out" 2>&1 ||
	echo "FAIL cupti numeric: the reference's numeric mode"; }
"$PY" - "$T" "$REF" <<'PY'
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
PY
cp "$T"/*.jsonl "$T"/*.err "${OUT:-$T}/" 2>/dev/null || true
