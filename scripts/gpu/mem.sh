#!/usr/bin/env bash
# GPU part "mem": `mem` of every enter (and of the error) as evmbpf reads it from outside,
# against the reference tracer's trace of the same run (torch.cuda.memory_stats_as_
# nested_dict() in-process), field by field. Scenarios (tests/gpu/mem_workload.py):
# allocations and frees between calls, a peak reset, empty_cache, an OOM caught and
# retried smaller, two devices when there are two; plain and with expandable segments;
# an uncaught OOM (the error event); each by --pid and launched; CUDA's lazy init between
# two module calls; with two devices, a process that set device 1 before the --pid attach.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
cd "$REPO"
[ -x "$REPO/build/evmbpf-gpu/evmbpf" ] && : "${EVMBPF:=$REPO/build/evmbpf-gpu/evmbpf}"
EVMBPF="${EVMBPF:-$REPO/build/evmbpf-static}"
PY="${PYTHON:-python3}"
REF=""
for d in "${EVMBPF_REFERENCE:-}" build/reference ../shared/reference; do
	[ -n "$d" ] && [ -f "$d/run_workload.py" ] && REF="$d" && break
done
if [ ! -x "$EVMBPF" ]; then
	echo "FAIL mem: $EVMBPF is missing: run \`make static\` and carry build/evmbpf-gpu"
	exit 1
fi
if [ -z "$REF" ]; then
	echo "FAIL mem: no reference tracer (set EVMBPF_REFERENCE, or copy ../shared/reference to build/reference and carry it)"
	exit 1
fi
OUT="${OUT:-$(mktemp -d)}/mem"
mkdir -p "$OUT"
W="$REPO/tests/gpu/mem_workload.py"
CMP="$REPO/tests/gpu/compare_mem.py"
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "FAIL mem: $PY sees no CUDA device (torch.cuda.is_available() is not True)"
	exit 1
fi
echo "mem: torch $("$PY" -c 'import torch; print(torch.__version__, "devices", torch.cuda.device_count())' 2>&1 | tail -1)"
two=1
"$PY" -c 'import torch; assert torch.cuda.device_count() >= 2' 2>/dev/null ||
	{ two=0; echo "mem: one device: the two-device scenarios do not run"; }
fail=0
run_one() { # NAME MODE ENV...
	local name="$1" mode="$2"; shift 2
	local ref="$OUT/$name-$mode.ref.jsonl" got="$OUT/$name-$mode.evmbpf.jsonl" err="$OUT/$name-$mode.err"
	rm -f "$ref" "$got" "$OUT/go"
	if [ "$mode" = launch ]; then
		env "$@" timeout 240 "$EVMBPF" --quiet --out "$got" -- "$PY" "$REF/run_workload.py" "$W" --trace "$ref" >"$err.target" 2>"$err"
	else
		env "$@" "$PY" "$REF/run_workload.py" "$W" --trace "$ref" --wait-for "$OUT/go" >"$OUT/ready" 2>"$err.target" &
		local tpid=$!
		local i=0
		until grep -q "ready pid=" "$OUT/ready" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
		timeout 240 "$EVMBPF" --quiet --pid "$tpid" --out "$got" 2>"$err" &
		local epid=$!
		i=0
		until grep -q "attached to" "$err" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
		touch "$OUT/go"
		wait $tpid
		wait $epid
	fi
	if "$PY" "$CMP" "$ref" "$got" "$name ($mode)" "$err"; then :; else fail=1; fi
}
for mode in pid launch; do
	run_one plain "$mode" MEM_SCENARIO=all
	run_one expandable "$mode" MEM_SCENARIO=all PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
	run_one oom-uncaught "$mode" MEM_SCENARIO=uncaught
	run_one lazy-init "$mode" MEM_SCENARIO=lazy
done
[ "$two" = 1 ] && run_one set-device-1 pid MEM_SCENARIO=basic MEM_DEVICE=1
run_one async launch MEM_SCENARIO=basic PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
echo "mem: traces and stderr in $OUT"
exit $fail
