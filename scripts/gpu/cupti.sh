#!/usr/bin/env bash
# --cupti on the GPU machine (called by scripts/gpu-check.sh; a minute or two):
# tests/gpu/cupti_workload.py traced with --cupti; PASS/FAIL lines and figures:
# - the agent loaded and kernels were seen; each module call's own GPU time plus what no
#   module launched adds up to the CUPTI kernel total (gpu_summary);
# - the module trace is the one without --cupti (same events);
# - torch.cuda.max_memory_allocated() of the job is the same with and without the agent;
# - the cost per module call with and without the agent (and the reference's numeric
#   mode next to them when ../shared/reference or $EVMBPF_REFERENCE is there).
# Needs build/evmbpf-static and build/evmbpf-cupti.so (built against CUDA 13's headers,
# the generation of the torch cu130 wheels' libcupti).
set -uo pipefail
cd "$(dirname "$0")/../.."
EVMBPF=${EVMBPF:-build/evmbpf-static}
PY=${PYTHON:-python3}
W=tests/gpu/cupti_workload.py
REF=${EVMBPF_REFERENCE:-}
for d in build/reference ../shared/reference shared/reference; do
	[ -z "$REF" ] && [ -f "$d/run_workload.py" ] && REF=$d
done
T=$(mktemp -d)
[ -x "$EVMBPF" ] || { echo "FAIL cupti: no $EVMBPF (make static; carry it)"; exit 0; }
[ -f build/evmbpf-cupti.so ] || { echo "FAIL cupti: no build/evmbpf-cupti.so (make agent; carry it)"; exit 0; }
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
a, b = fig("nocupti"), fig("cupti")
check(a and b and a["max_memory_allocated"] == b["max_memory_allocated"],
      "max_memory_allocated unchanged by the agent: %s vs %s" % (a and a["max_memory_allocated"], b and b["max_memory_allocated"]))
n = len([e for e in ev if e["event"] == "enter"])
p = fig("plain")
rows = [("untraced", p), ("evmbpf", a), ("evmbpf --cupti", b)]
if REF:
    rows += [("reference", fig("ref")), ("reference --numeric", fig("refnum"))]
for name, f in rows:
    if f and p:
        print("  %-22s run %.3f s, %+.1f us per module call (%d calls)"
              % (name, f["run_s"], (f["run_s"] - p["run_s"]) / max(n, 1) * 1e6, n))
print("SKIP cupti numeric: --numeric stats of CUDA tensors on the device are not implemented yet")
PY
cp "$T"/*.jsonl "$T"/*.err "${OUT:-$T}/" 2>/dev/null || true
