#!/usr/bin/env bash
# The GPU machine's checks, in one call: first whether evmbpf can run there at all (a
# kernel with BPF and uprobes), then every scripts/gpu/*.sh in order. Each prints PASS,
# FAIL or SKIP lines and figures; the exit status is 1 when any FAIL was printed.
# Carry build/evmbpf-gpu (make static: the static evmbpf and its CUPTI agent) to the
# machine.
#   scripts/gpu-check.sh 2>&1 | tee "$OUT/gpu-check.log"
set -uo pipefail
cd "$(dirname "$0")/.."
echo "kernel $(uname -r); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
case "$(uname -r)" in
4.4.0*) echo "SKIP all: this kernel reports 4.4.0 (gVisor): no BPF, no uprobes; evmbpf cannot run here"; exit 0 ;;
esac
if ! python3 - <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
# bpf(BPF_PROG_LOAD=5) with a NULL attr: EFAULT or EINVAL when the syscall exists, ENOSYS when not
r = libc.syscall(321, 5, None, 0)
sys.exit(1 if r == -1 and ctypes.get_errno() == 38 else 0)
PY
then
	echo "SKIP all: no bpf(2) syscall here (ENOSYS); evmbpf cannot run"
	exit 0
fi
status=0
for check in scripts/gpu/*.sh; do
	echo "== $check"
	bash "$check" 2>&1 | tee /tmp/gpu-check.part
	grep -q '^FAIL' /tmp/gpu-check.part && status=1
done
exit $status
