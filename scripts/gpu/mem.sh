#!/usr/bin/env bash
# GPU check "mem": `mem` of every enter (and of the error) as evmbpf reads it from outside.
#   scripts/gpu/mem.sh launch|pid|expandable
# One check per call (scripts/gpu-check.sh runs each with its own folder and timeout):
#   launch      launched: allocations and frees between calls, a peak reset, empty_cache,
#               an OOM caught and retried smaller (MEM_SCENARIO=all), an uncaught OOM (the
#               error event), CUDA's lazy init between two module calls, and the
#               cudaMallocAsync backend (null and one warning)
#   pid         the same by --pid (but cudaMallocAsync); with two devices, a process that
#               set device 1 before the attach
#   expandable  MEM_SCENARIO=all with expandable segments, by --pid and launched
# On a GPU: against the reference tracer's trace of the same run
# (torch.cuda.memory_stats_as_nested_dict() in-process; both tracers on one process),
# field by field (tests/gpu/compare_mem.py). With EVMBPF_GPU_STANDIN=1 (no GPU): the
# CUDA build of torch 2.6's real libc10_cuda.so in the trixie chroot (scripts/torch-cuda.sh,
# tests/workloads/cuda_allocator.py: its allocator initialised for two stand-in devices,
# its counters set before each forward), each enter against the counters set
# (tests/gpu/standin_mem.py); SKIP when the chroot or that library is not here.
# Folder: $CHECK_DIR (else $OUT/mem-CHECK, else a temporary one); runs end by
# $CHECK_DEADLINE (seconds since the epoch; default four minutes from now).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
cd "$REPO"
CHECK="${1:-}"
case "$CHECK" in launch | pid | expandable) ;; *)
	echo "usage: scripts/gpu/mem.sh launch|pid|expandable" >&2
	exit 2
	;;
esac
NAME="mem $CHECK"
[ -x "$REPO/build/evmbpf-gpu/evmbpf" ] && : "${EVMBPF:=$REPO/build/evmbpf-gpu/evmbpf}"
EVMBPF="${EVMBPF:-$REPO/build/evmbpf-static}"
STANDIN="${EVMBPF_GPU_STANDIN:-0}"
DEADLINE="${CHECK_DEADLINE:-$(($(date +%s) + 240))}"
DIR="${CHECK_DIR:-${OUT:-$(mktemp -d)}/mem-$CHECK}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd -P)"
left() { local s=$((DEADLINE - $(date +%s) - 2)); [ $s -lt 1 ] && s=1; echo $s; }

REF=""
for d in "${EVMBPF_REFERENCE:-}" build/reference ../shared/reference; do
	[ -n "$d" ] && [ -f "$d/run_workload.py" ] && REF="$d" && break
done
if [ ! -x "$EVMBPF" ]; then
	echo "FAIL $NAME: $EVMBPF is missing: run \`make static\` and carry build/evmbpf-gpu"
	exit 1
fi

if [ "$STANDIN" = 1 ]; then
	# the chroot's python3 (torch 2.6, CPU) with the CUDA build's libc10_cuda.so beside it
	[ "$(id -u)" = 0 ] || { echo "SKIP $NAME: the stand-in runs in the trixie chroot: root only"; exit 0; }
	CHROOT="$(scripts/chroot.sh path trixie 2>/dev/null)"
	[ -n "$CHROOT" ] && [ -x "$CHROOT/usr/bin/python3" ] ||
		{ echo "SKIP $NAME: the trixie chroot is not built (scripts/chroot.sh ensure trixie)"; exit 0; }
	TC="$(scripts/torch-cuda.sh path)"
	[ -f "$TC/lib/libc10_cuda.so.2.6" ] ||
		{ echo "SKIP $NAME: no CUDA build of libc10_cuda.so here (scripts/torch-cuda.sh ensure)"; exit 0; }
	[ -f ../shared/reference/run_workload.py ] ||
		{ echo "SKIP $NAME: no ../shared/reference (the chroot sees it at /evmbpf/shared)"; exit 0; }
	cc -shared -fPIC -O2 -o "$DIR/libcudart_devices.so" tests/standin/cudart/cudart_devices.c 2>"$DIR/cc.err" ||
		{ echo "SKIP $NAME: cannot build tests/standin/cudart (no compiler?): $(tail -1 "$DIR/cc.err")"; exit 0; }
	export EVMBPF_CHROOT_BIND="$DIR:/evmbpf/out $TC:/evmbpf/torch-cuda"
	export EVMBPF_TEST_ASSUME_CUDA=1 CUDA_ALLOCATOR_POKE=1
	export CUDA_ALLOCATOR_STANDIN=/evmbpf/out/libcudart_devices.so
	PYCMD=(scripts/chroot.sh run trixie python3)
	HARNESS=/evmbpf/shared/reference/run_workload.py
	W=/evmbpf/main/tests/workloads/cuda_allocator.py
	GO_GUEST=/evmbpf/out/go
	echo "$NAME: stand-in: torch 2.6's libc10_cuda.so in the trixie chroot, two stand-in devices"
else
	PY="${PYTHON:-python3}"
	if [ -z "$REF" ]; then
		echo "FAIL $NAME: no reference tracer (set EVMBPF_REFERENCE, or copy ../shared/reference to build/reference and carry it)"
		exit 1
	fi
	if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
		echo "FAIL $NAME: $PY sees no CUDA device (torch.cuda.is_available() is not True)"
		exit 1
	fi
	echo "$NAME: torch $("$PY" -c 'import torch; print(torch.__version__, "devices", torch.cuda.device_count())' 2>&1 | tail -1)"
	PYCMD=("$PY")
	HARNESS="$REF/run_workload.py"
	W="$REPO/tests/gpu/mem_workload.py"
	GO_GUEST="$DIR/go"
fi

fail=0
run_one() { # NAME MODE ENV...
	local name="$1" mode="$2"; shift 2
	local base="$DIR/$name-$mode"
	local ref="$base.ref.jsonl" got="$base.evmbpf.jsonl" err="$base.err"
	local refargs=()
	[ "$STANDIN" = 1 ] || refargs=(--trace "$ref")
	rm -f "$ref" "$got" "$DIR/go" "$base.ready"
	if [ "$mode" = launch ]; then
		env "$@" timeout -k 5 "$(left)" "$EVMBPF" --quiet --out "$got" -- "${PYCMD[@]}" "$HARNESS" "$W" \
			"${refargs[@]}" >"$base.target" 2>"$err"
	else
		env "$@" timeout -k 5 "$(left)" "${PYCMD[@]}" "$HARNESS" "$W" "${refargs[@]}" --wait-for "$GO_GUEST" \
			>"$base.ready" 2>"$base.target" &
		local tpid=$! pid=""
		until [ -n "$pid" ] || [ "$(left)" -le 1 ] || ! kill -0 $tpid 2>/dev/null; do
			sleep 0.1
			pid="$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$base.ready" 2>/dev/null | head -1)"
		done
		if [ -z "$pid" ]; then
			echo "FAIL $NAME: $name ($mode): the target never said it was ready"
			tail -5 "$base.target"
			kill $tpid 2>/dev/null
			wait $tpid
			fail=1
			return
		fi
		env "$@" timeout -k 5 "$(left)" "$EVMBPF" --quiet --pid "$pid" --out "$got" 2>"$err" &
		local epid=$!
		until grep -q "attached to" "$err" 2>/dev/null || [ "$(left)" -le 1 ] || ! kill -0 $epid 2>/dev/null; do
			sleep 0.1
		done
		touch "$DIR/go"
		wait $tpid
		wait $epid
	fi
	if [ "$STANDIN" = 1 ]; then
		python3 tests/gpu/standin_mem.py "$got" "$name ($mode)" "$err" || fail=1
	else
		"$PY" tests/gpu/compare_mem.py "$ref" "$got" "$name ($mode)" "$err" || fail=1
	fi
}

if [ "$STANDIN" = 1 ]; then
	case "$CHECK" in
	launch) run_one plain launch CUDA_ALLOCATOR_INIT=run ;;
	pid) run_one plain pid CUDA_ALLOCATOR_INIT=build ;;
	expandable) run_one expandable launch CUDA_ALLOCATOR_INIT=run PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ;;
	esac
else
	two=1
	"$PY" -c 'import torch; assert torch.cuda.device_count() >= 2' 2>/dev/null ||
		{ two=0; echo "$NAME: one device: the two-device scenarios do not run"; }
	case "$CHECK" in
	launch | pid)
		run_one plain "$CHECK" MEM_SCENARIO=all
		run_one oom-uncaught "$CHECK" MEM_SCENARIO=uncaught
		run_one lazy-init "$CHECK" MEM_SCENARIO=lazy
		[ "$CHECK" = launch ] && run_one async launch MEM_SCENARIO=basic PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
		[ "$CHECK" = pid ] && [ "$two" = 1 ] && run_one set-device-1 pid MEM_SCENARIO=basic MEM_DEVICE=1
		;;
	expandable)
		run_one expandable pid MEM_SCENARIO=all PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
		run_one expandable launch MEM_SCENARIO=all PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
		;;
	esac
fi
echo "$NAME: traces and stderr in $DIR"
exit $fail
