#!/usr/bin/env bash
# GPU check "cupti": --cupti on a launched CUDA job.
#   scripts/gpu/cupti.sh time|numeric
# One check per call (scripts/gpu-check.sh runs each with its own folder and timeout):
#   time     tests/gpu/cupti_workload.py traced with and without --cupti (and with
#            --cupti --numeric): the agent loaded and kernels were seen; each module
#            call's own GPU time plus what no module launched adds up to the CUPTI kernel
#            total (gpu_summary); the module trace is the one without --cupti;
#            torch.cuda.max_memory_allocated() is the same with and without the agent;
#            the trace header and gpu_summary name the libcupti taken; the cost per module
#            call, next to the reference's when it is there (tests/gpu/check_cupti_time.py)
#   numeric  --cupti --numeric on tests/gpu/cupti_numeric_workload.py (every dtype, strided
#            views, NaN/Inf, a side stream): every CUDA tensor's stats against the
#            reference tracer's --numeric run (counts, min, max, median equal; mean and std
#            within 1e-9 relative), the GPU times adding up with the agent's own kernels
#            apart, max_memory_allocated() unchanged (tests/gpu/check_cupti_numeric.py)
# With EVMBPF_GPU_STANDIN=1 (no GPU): the same runs on the host's Python and torch with
# the stand-in libcuda/libcupti (tests/cupti/fake_cuda.c, built here against the CUPTI
# headers), the agent loaded as the driver would load it (EVMBPF_TEST_INJECT=1):
# tests/workloads/cupti_standin.py, whose leaf modules each "launch" a kernel through the
# stand-in's CUPTI callback, for time; tests/workloads/cupti_fake_cuda.py (tensors that
# read as cuda:0) for numeric, against the stats the workload computed itself
# (tests/gpu/standin_numeric.py).
# Needs build/evmbpf-gpu/ (make static: the static evmbpf and evmbpf-cupti.so, built
# against CUDA 12's or 13's headers: it reads either major's libcupti,
# agent/cupti_layout.h), or build/evmbpf-static and build/evmbpf-cupti.so.
# Folder: $CHECK_DIR (else $OUT/cupti-CHECK, else a temporary one); runs end by
# $CHECK_DEADLINE (seconds since the epoch; default four minutes from now).
set -uo pipefail
cd "$(dirname "$0")/../.."
CHECK="${1:-}"
case "$CHECK" in time) NAME="cupti" ;; numeric) NAME="cupti numeric" ;; *)
	echo "usage: scripts/gpu/cupti.sh time|numeric" >&2
	exit 2
	;;
esac
# the folder `make static` makes (the static evmbpf, its agent beside it), else the two
# files of build/
[ -x build/evmbpf-gpu/evmbpf ] && : "${EVMBPF:=build/evmbpf-gpu/evmbpf}"
EVMBPF=${EVMBPF:-build/evmbpf-static}
STANDIN="${EVMBPF_GPU_STANDIN:-0}"
DEADLINE="${CHECK_DEADLINE:-$(($(date +%s) + 240))}"
T="${CHECK_DIR:-${OUT:-$(mktemp -d)}/cupti-$CHECK}"
mkdir -p "$T"
T="$(cd "$T" && pwd -P)"
left() { local s=$((DEADLINE - $(date +%s) - 2)); [ $s -lt 1 ] && s=1; echo $s; }
tl() { timeout -k 5 "$(left)" "$@"; }
REF=${EVMBPF_REFERENCE:-}
for d in build/reference ../shared/reference shared/reference; do
	[ -z "$REF" ] && [ -f "$d/run_workload.py" ] && REF=$d
done
[ -x "$EVMBPF" ] || { echo "FAIL $NAME: no $EVMBPF (make static; carry it)"; exit 1; }
[ -f "$(dirname "$EVMBPF")/evmbpf-cupti.so" ] || { echo "FAIL $NAME: no evmbpf-cupti.so beside $EVMBPF (make static; carry build/evmbpf-gpu)"; exit 1; }

if [ "$STANDIN" = 1 ]; then
	PY=${PYTHON:-/usr/bin/python3.11}
	"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP $NAME: $PY has no torch (PYTHON=...)"; exit 0; }
	[ -f "$REF/run_workload.py" ] || { echo "SKIP $NAME: no reference tracer's run_workload.py (EVMBPF_REFERENCE=DIR)"; exit 0; }
	INC=""
	for d in /usr/local/cuda/include "$(scripts/cupti-headers.sh path 2>/dev/null)"; do
		[ -z "$INC" ] && [ -f "$d/cupti.h" ] && [ -f "$d/cuda.h" ] && INC=$d
	done
	[ -n "$INC" ] || { echo "SKIP $NAME: no cupti.h and cuda.h for the stand-in libcuda (scripts/cupti-headers.sh ensure)"; exit 0; }
	LIB="$T/libfakecuda.so"
	gcc -O2 -shared -fPIC -fvisibility=hidden -ffp-contract=off -Iinclude -Iagent -I"$INC" \
		tests/cupti/fake_cuda.c -o "$LIB" -lm 2>"$T/cc.err" ||
		{ echo "SKIP $NAME: cannot build tests/cupti/fake_cuda.c: $(tail -1 "$T/cc.err")"; exit 0; }
	export EVMBPF_TEST_INJECT=1 EVMBPF_CUPTI_LIB="$LIB" EVMBPF_CUDA_LIB="$LIB"
	# the agent's acknowledgement waited for as long as a loaded machine needs
	export EVMBPF_TEST_CUPTI_ACK_MS=60000
	unset CUDA_INJECTION64_PATH
	HARNESS="$REF/run_workload.py"
	W=tests/workloads/cupti_standin.py
	NW=tests/workloads/cupti_fake_cuda.py
	REF=""   # the reference reads no stand-in device: the workloads give what is wanted
	echo "$NAME: stand-in: $PY, the stand-in libcuda/libcupti $LIB (headers $INC)"
else
	PY=${PYTHON:-python3}
	"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
		{ echo "FAIL $NAME: $PY sees no CUDA device (torch.cuda.is_available() is not True)"; exit 1; }
	W=tests/gpu/cupti_workload.py
	NW=tests/gpu/cupti_numeric_workload.py
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
fi

# one run first, its times dropped: the first process on a machine just started pays its
# disk and driver warm-up (0.71 s untraced against 0.26 s traced, seen on an H200), which
# would read as a traced run faster than an untraced one
tl "$PY" "$HARNESS" "$([ "$CHECK" = time ] && echo "$W" || echo "$NW")" > "$T/warmup.out" 2>&1
if [ "$CHECK" = time ]; then
	tl "$PY" "$HARNESS" "$W" > "$T/plain.out" 2>&1 || { echo "FAIL $NAME: the workload fails alone"; tail -5 "$T/plain.out"; exit 1; }
	tl "$EVMBPF" --out "$T/nocupti.jsonl" -- "$PY" "$HARNESS" "$W" > "$T/nocupti.out" 2> "$T/nocupti.err" ||
		{ echo "FAIL $NAME: evmbpf without --cupti"; tail -5 "$T/nocupti.err"; exit 1; }
	tl "$EVMBPF" --cupti -v --out "$T/cupti.jsonl" -- "$PY" "$HARNESS" "$W" > "$T/cupti.out" 2> "$T/cupti.err" ||
		{ echo "FAIL $NAME: evmbpf --cupti"; tail -5 "$T/cupti.err"; exit 1; }
	tl "$EVMBPF" --cupti --numeric -v --out "$T/cnum.jsonl" -- "$PY" "$HARNESS" "$W" > "$T/cnum.out" 2> "$T/cnum.err" ||
		{ echo "FAIL $NAME: evmbpf --cupti --numeric"; tail -5 "$T/cnum.err"; }
	grep -- '--cupti' "$T/cupti.err" | sed 's/^/  /'
	if [ -n "$REF" ]; then
		tl "$PY" "$HARNESS" "$W" --trace "$T/ref.jsonl" > "$T/ref.out" 2>&1 || echo "FAIL $NAME: the reference tracer"
		tl "$PY" "$HARNESS" "$W" --trace "$T/refnum.jsonl" --numeric > "$T/refnum.out" 2>&1 || echo "FAIL $NAME: the reference's numeric mode"
	fi
	"$PY" tests/gpu/check_cupti_time.py "$T" "$REF"
else
	tl "$PY" "$HARNESS" "$NW" > "$T/nplain.out" 2>&1 || { echo "FAIL $NAME: the workload fails alone"; tail -5 "$T/nplain.out"; }
	tl "$EVMBPF" --cupti --numeric -v --out "$T/ncupti.jsonl" -- "$PY" "$HARNESS" "$NW" > "$T/ncupti.out" 2> "$T/ncupti.err" ||
		{ echo "FAIL $NAME: evmbpf --cupti --numeric"; tail -5 "$T/ncupti.err"; }
	grep -- '--numeric\|--cupti' "$T/ncupti.err" | sed 's/^/  /'
	if [ "$STANDIN" = 1 ]; then
		"$PY" tests/gpu/standin_numeric.py "$T"
	else
		[ -n "$REF" ] && { tl "$PY" "$HARNESS" "$NW" --trace "$T/nref.jsonl" --numeric > "$T/nref.out" 2>&1 ||
			echo "FAIL $NAME: the reference's numeric mode"; }
		"$PY" tests/gpu/check_cupti_numeric.py "$T" "$REF"
	fi
fi
echo "$NAME: traces and stderr in $T"
