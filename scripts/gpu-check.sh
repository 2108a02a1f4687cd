#!/usr/bin/env bash
# The checks that need a GPU, in one call on the GPU machine (see README, "GPU checks").
#
#   scripts/gpu-check.sh            every part, scripts/gpu/*.sh in order
#   scripts/gpu-check.sh mem        only scripts/gpu/mem.sh
#
# Needs build/evmbpf-static (`make static` here: the GPU machine has no libbpf, clang or
# bpftool) and the reference tracer at $EVMBPF_REFERENCE, build/reference or
# ../shared/reference. Each part prints its own PASS/FAIL lines and figures; the exit
# status is the number of parts that failed. On a kernel without BPF (gVisor reports
# 4.4.0) it says so in one line and exits 2.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$REPO"

kernel="$(uname -r)"
# bpf(BPF_PROG_LOAD) of nothing: EINVAL means the syscall exists, ENOSYS that it does not
bpf_state="$(python3 - <<'PY' 2>/dev/null
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(321, 5, None, 0)  # SYS_bpf, BPF_PROG_LOAD, NULL attr
e = ctypes.get_errno()
print("absent" if e == errno.ENOSYS else "present")
PY
)"
case "$kernel" in
4.4.0*) echo "gpu-check: kernel $kernel (gVisor): no BPF, no uprobes; evmbpf cannot run here"; exit 2 ;;
esac
if [ "$bpf_state" != present ]; then
	echo "gpu-check: kernel $kernel has no bpf() syscall here; evmbpf cannot run"
	exit 2
fi
if [ ! -x build/evmbpf-static ]; then
	echo "gpu-check: build/evmbpf-static is missing: run \`make static\` and carry it"
	exit 2
fi
echo "gpu-check: kernel $kernel, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | tr -s ' ' | paste -sd, -)"
failed=0
for part in scripts/gpu/*.sh; do
	name="$(basename "$part" .sh)"
	[ $# -gt 0 ] && [[ " $* " != *" $name "* ]] && continue
	echo "== $name"
	bash "$part" || failed=$((failed + 1))
done
exit $failed
