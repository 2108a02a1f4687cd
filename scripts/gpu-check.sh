#!/usr/bin/env bash
# The GPU machine's checks, in one call of at most 8 minutes.
#   scripts/gpu-check.sh [--stand-in | --gpu] [CHECK...]
# First the facts (facts.txt): the kernel, the driver (nvidia-smi), torch and its CUDA,
# the libcupti files the Python's wheels carry, the hypervisor, and evmbpf doctor's
# lines (whether BPF and uprobes work, whether hardware breakpoints fire), and doctor
# --pid's CUDA and CUPTI agent lines for this Python once it has initialised CUDA. Then each
# check on its own, in its own folder (CHECK/, its output in CHECK/log) under its own
# timeout, one line PASS/FAIL/SKIP as soon as it ends, followed by its own lines
# (indented):
#   mem-launch      scripts/gpu/mem.sh launch       mem-pid    scripts/gpu/mem.sh pid
#   mem-expandable  scripts/gpu/mem.sh expandable   cupti-time scripts/gpu/cupti.sh time
#   cupti-numeric   scripts/gpu/cupti.sh numeric    (--cupti --numeric)
# Then a summary (summary.txt); the exit status is 1 when a FAIL was printed. Where BPF
# does not work (gVisor), each check is one SKIP line saying so.
# --stand-in (the default where no GPU is found: no nvidia-smi that lists one): the same
# checks without a GPU (EVMBPF_GPU_STANDIN=1): the stand-in libcuda/libcupti
# (tests/cupti/fake_cuda.c) and the real CUDA allocator of torch 2.6 in the trixie
# chroot (tests/workloads/cuda_allocator.py); a check whose stand-in is not here is a
# SKIP with the reason. --gpu: the GPU checks even where none is found (they FAIL).
# Output under $OUT (the device tool's folder), else a temporary folder (printed).
# Needs build/evmbpf-gpu (make static: the static evmbpf and its CUPTI agent) and, on a
# GPU, the reference tracer (build/reference, a copy of ../shared/reference).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd -P)"
START=$(date +%s)
TOTAL=${EVMBPF_GPU_CHECK_SECONDS:-470}   # the whole run, facts included (< 8 minutes)
DEADLINE=$((START + TOTAL))
MODE=auto
CHECKS=()
for a in "$@"; do
	case "$a" in
	--stand-in) MODE=standin ;;
	--gpu) MODE=gpu ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
	-*) echo "gpu-check: unknown option $a" >&2; exit 2 ;;
	*) CHECKS+=("$a") ;;
	esac
done
ALL=(mem-launch mem-pid mem-expandable cupti-time cupti-numeric)
[ ${#CHECKS[@]} -eq 0 ] && CHECKS=("${ALL[@]}")
declare -A CMD=([mem-launch]="scripts/gpu/mem.sh launch" [mem-pid]="scripts/gpu/mem.sh pid"
	[mem-expandable]="scripts/gpu/mem.sh expandable" [cupti-time]="scripts/gpu/cupti.sh time"
	[cupti-numeric]="scripts/gpu/cupti.sh numeric")
# each check's own limit, seconds (the sum and the facts' 30 fit in TOTAL)
declare -A BUDGET=([mem-launch]=85 [mem-pid]=85 [mem-expandable]=60 [cupti-time]=120
	[cupti-numeric]=90)
for c in "${CHECKS[@]}"; do
	[ -n "${CMD[$c]:-}" ] || { echo "gpu-check: no check $c (${ALL[*]})" >&2; exit 2; }
done

BASE="${OUT:-}"
[ -n "$BASE" ] || BASE="$(mktemp -d /tmp/gpu-check.XXXXXX)"
mkdir -p "$BASE"
BASE="$(cd "$BASE" && pwd -P)"
[ -x build/evmbpf-gpu/evmbpf ] && : "${EVMBPF:=$REPO/build/evmbpf-gpu/evmbpf}"
export EVMBPF="${EVMBPF:-$REPO/build/evmbpf-static}"

if [ "$MODE" = auto ]; then
	if timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then MODE=gpu; else MODE=standin; fi
fi
if [ "$MODE" = standin ]; then
	export EVMBPF_GPU_STANDIN=1
	export PYTHON="${PYTHON:-/usr/bin/python3.11}"
else
	export EVMBPF_GPU_STANDIN=0
	export PYTHON="${PYTHON:-python3}"
fi

# ---- the facts ----
fact() { echo "$*" | tee -a "$BASE/facts.txt"; }
: > "$BASE/facts.txt"
fact "gpu-check: $MODE mode; output in $BASE"
fact "kernel: $(uname -r) ($(uname -m))"
if command -v nvidia-smi >/dev/null; then
	fact "driver: $(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4 | paste -sd';')"
else
	fact "driver: no nvidia-smi"
fi
fact "python: $PYTHON: $(timeout 60 "$PYTHON" - <<'PY' 2>&1 | tail -1
import sys
try:
    import torch
except Exception as exc:
    print(sys.version.split()[0], "no torch:", exc)
    raise SystemExit
ok = torch.cuda.is_available()
print(sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda,
      "available", ok, "devices", torch.cuda.device_count() if ok else 0,
      "cudnn", torch.backends.cudnn.version() if ok else None)
PY
)"
fact "libcupti: $(timeout 30 "$PYTHON" - <<'PY' 2>&1 | tail -1
import glob, os, site, sys
dirs = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")])
found = []
for d in sorted(dirs):
    for pat in ("nvidia/*/lib/libcupti.so*", "nvidia/*/*/lib/libcupti.so*", "torch/lib/libcupti*.so*"):
        found += [os.path.realpath(p) if os.path.islink(p) else p for p in glob.glob(os.path.join(d, pat))]
print(" ".join(sorted(set(found))) or "none in the wheels of " + " ".join(sorted(dirs)))
PY
)"
hv="$( (dmesg 2>/dev/null | grep -i hypervisor | head -2) | paste -sd';')"
[ -r /sys/hypervisor/type ] && hv="$hv /sys/hypervisor/type=$(cat /sys/hypervisor/type)"
grep -qw hypervisor /proc/cpuinfo 2>/dev/null && hv="$hv cpuinfo:hypervisor-flag" || hv="$hv cpuinfo:no-hypervisor-flag"
command -v systemd-detect-virt >/dev/null && hv="$hv detect-virt=$(systemd-detect-virt 2>/dev/null)"
fact "hypervisor:${hv}"
BPF_OK=0
if [ -x "$EVMBPF" ]; then
	timeout 40 "$EVMBPF" doctor > "$BASE/doctor.txt" 2>&1
	while IFS= read -r line; do fact "doctor: $line"; done < "$BASE/doctor.txt"
	grep -q '^✓ BPF:' "$BASE/doctor.txt" && BPF_OK=1
	NO_BPF="$(grep -m1 '^✗ \(BPF\|kernel\|uprobes\)' "$BASE/doctor.txt" || echo "evmbpf doctor gave no BPF line")"
else
	fact "evmbpf: $EVMBPF is missing (make static; carry build/evmbpf-gpu)"
	NO_BPF="no $EVMBPF"
fi
fact "BPF works: $([ $BPF_OK = 1 ] && echo yes || echo "no ($NO_BPF)")"
# what --cupti's agent needs of a job of this Python (its glibc, a libcupti of CUDA 12/13),
# on a process that has initialised CUDA where there is a device
if [ -x "$EVMBPF" ]; then
	"$PYTHON" -c 'import os, sys, time, torch
torch.cuda.is_available() and torch.zeros(1, device="cuda")
print(os.getpid(), flush=True); time.sleep(60)' > "$BASE/agent-target.out" 2>&1 &
	apid=$!
	for _ in $(seq 300); do [ -s "$BASE/agent-target.out" ] || ! kill -0 $apid 2>/dev/null && break; sleep 0.1; done
	if kill -0 $apid 2>/dev/null; then
		fact "doctor --pid: $(timeout 30 "$EVMBPF" doctor --pid "$apid" 2>/dev/null | grep -E '^. (CUPTI agent|CUDA):' | paste -sd' ')"
	else
		fact "doctor --pid: no Python with torch to ask ($(tail -1 "$BASE/agent-target.out"))"
	fi
	kill $apid 2>/dev/null
	wait $apid 2>/dev/null
fi

# ---- the checks ----
: > "$BASE/summary.txt"
npass=0 nfail=0 nskip=0
verdict() { # LINE: printed at once, and kept for the summary
	echo "$1"
	echo "$1" >> "$BASE/summary.txt"
	case "$1" in PASS*) npass=$((npass + 1)) ;; FAIL*) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
}
for c in "${CHECKS[@]}"; do
	dir="$BASE/$c"
	mkdir -p "$dir"
	echo "== $c: ${CMD[$c]}"
	if [ ! -x "$EVMBPF" ]; then
		verdict "FAIL $c: no $EVMBPF (make static; carry build/evmbpf-gpu)"
		continue
	fi
	if [ $BPF_OK = 0 ]; then
		verdict "SKIP $c: BPF does not work here, evmbpf cannot trace ($NO_BPF)"
		continue
	fi
	now=$(date +%s)
	limit=${BUDGET[$c]}
	[ $((DEADLINE - now)) -lt "$limit" ] && limit=$((DEADLINE - now))
	if [ "$limit" -lt 10 ]; then
		verdict "SKIP $c: no time left of the ${TOTAL} s"
		continue
	fi
	CHECK_DIR="$dir" CHECK_DEADLINE=$((now + limit - 3)) timeout -k 5 "$limit" bash ${CMD[$c]} > "$dir/log" 2>&1
	rc=$?
	took=$(($(date +%s) - now))
	first_fail="$(grep -m1 '^FAIL' "$dir/log" | sed 's/^FAIL //')"
	first_skip="$(grep -m1 '^SKIP' "$dir/log" | sed 's/^SKIP //')"
	np=$(grep -c '^PASS' "$dir/log") nf=$(grep -c '^FAIL' "$dir/log")
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		verdict "FAIL $c: timed out after $limit s ($np PASS, $nf FAIL lines before; $dir)"
	elif [ "$nf" -gt 0 ]; then
		verdict "FAIL $c: $nf of $((np + nf)) failed, first: $first_fail ($took s; $dir)"
	elif [ $rc != 0 ]; then
		verdict "FAIL $c: exit status $rc without a FAIL line ($took s; $dir)"
	elif [ "$np" -gt 0 ]; then
		verdict "PASS $c: $np passed ($took s; $dir)"
	elif [ -n "$first_skip" ]; then
		verdict "SKIP $c: $first_skip"
	else
		verdict "FAIL $c: no verdict printed ($took s; $dir)"
	fi
	tail -40 "$dir/log" | sed 's/^/  | /'
done

echo "== summary ($MODE mode, $(($(date +%s) - START)) s; $BASE)"
grep -m1 '^driver:' "$BASE/facts.txt"
grep -m1 '^python:' "$BASE/facts.txt"
grep -m1 '^BPF works:' "$BASE/facts.txt"
grep -m1 'hardware breakpoints' "$BASE/facts.txt" | cut -c1-200 || true
cat "$BASE/summary.txt"
echo "$npass PASS, $nfail FAIL, $nskip SKIP" | tee -a "$BASE/summary.txt"
[ $nfail = 0 ]
