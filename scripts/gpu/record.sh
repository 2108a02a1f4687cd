#!/usr/bin/env bash
# GPU check "record": `evmbpf record` beside CUDA processes on a GPU machine.
#   scripts/gpu/record.sh
# The recorder is started, then (the moment it says `recording`, no wait for its attach)
# two CUDA workloads of the machine's Python: one whose module raises
# torch.cuda.OutOfMemoryError in its third forward (a real allocation past the device's
# memory), uncaught; one that runs its forwards and exits 0. The first must leave its
# file, whose `error` event names the OOM and whose closing mark names its command and
# host; the second none. Prints PASS/FAIL lines; exit 1 on a FAIL. Run by hand with the
# device tool (not one of scripts/gpu-check.sh's checks: it has no stand-in here):
#   make static; run: command "scripts/gpu/record.sh", carry ["build/evmbpf-gpu"]
# Folder: $OUT/record (else a temporary one).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
cd "$REPO"
EVMBPF="${EVMBPF:-$REPO/build/evmbpf-gpu/evmbpf}"
PY="${PYTHON:-python3}"
BASE="${OUT:-$(mktemp -d)}/record"
mkdir -p "$BASE"
DIR="$(mktemp -d /tmp/evmbpf-record-check.XXXXXX)/traces"
fail=0
say() { echo "$@" | tee -a "$BASE/log"; }

[ -x "$EVMBPF" ] || { say "FAIL record: $EVMBPF is missing (make static)"; exit 1; }
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	{ say "FAIL record: $PY sees no CUDA device"; exit 1; }

cat >"$BASE/cuda_work.py" <<'EOF'
import os, sys, torch
class Hog(torch.nn.Module):
    def forward(self, x, step):
        if step == 2 and os.environ.get("HOG") == "1":
            # far past the device's memory: torch.cuda.OutOfMemoryError, uncaught
            free, total = torch.cuda.mem_get_info()
            torch.empty(int(total * 4), dtype=torch.uint8, device="cuda")
        return x * 2
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.hog = Hog()
    def forward(self, x, step):
        return self.hog(self.lin(x), step)
net = Net().cuda()
x = torch.ones(8, 64, device="cuda")
for step in range(5):
    net(x, step)
torch.cuda.synchronize()
EOF

"$EVMBPF" record --dir "$DIR" --tail 200 ${RECORD_ARGS:-} 2>"$BASE/recorder.err" &
REC=$!
for _ in $(seq 1 300); do
	grep -q "recording" "$BASE/recorder.err" 2>/dev/null && break
	kill -0 $REC 2>/dev/null || break
	sleep 0.1
done
grep -q "recording" "$BASE/recorder.err" || { say "FAIL record: the recorder did not start:"; sed 's/^/  /' "$BASE/recorder.err" | tee -a "$BASE/log"; exit 1; }
HOG=1 "$PY" "$BASE/cuda_work.py" evmbpf-record-check >"$BASE/hog.out" 2>&1 &
HOG_PID=$!
HOG=0 "$PY" "$BASE/cuda_work.py" evmbpf-record-check >"$BASE/clean.out" 2>&1 &
CLEAN_PID=$!
wait $HOG_PID; HOG_RC=$?
wait $CLEAN_PID; CLEAN_RC=$?
for _ in $(seq 1 100); do
	ls "$DIR"/evmbpf-"$HOG_PID"*.jsonl >/dev/null 2>&1 && break
	sleep 0.1
done
sleep 1
kill -TERM $REC; wait $REC; REC_RC=$?
cp "$DIR"/*.jsonl "$BASE"/ 2>/dev/null
say "record: the OOM workload exited $HOG_RC, the clean one $CLEAN_RC, the recorder $REC_RC"
sed 's/^/  recorder: /' "$BASE/recorder.err" | tail -20 | tee -a "$BASE/log"
FILE=$(ls "$DIR"/evmbpf-"$HOG_PID"*.jsonl 2>/dev/null | head -1)
if [ -z "$FILE" ]; then
	say "FAIL record: no file for the OOM workload $HOG_PID"; fail=1
else
	"$PY" - "$FILE" <<'EOF' | tee -a "$BASE/log"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
err = [l for l in lines if l.get("event") == "error"]
mark = lines[-1]
ok = bool(err) and "OutOfMemoryError" in json.dumps(err[-1]) and mark.get("event") == "recorded" \
    and "cuda_work.py" in json.dumps(mark.get("process", {}).get("command")) \
    and mark.get("process", {}).get("host")
enters = sum(l.get("event") == "enter" for l in lines)
print(("PASS" if ok else "FAIL") + f" record: the OOM workload's file: {enters} enters, error "
      f"{err[-1].get('exc_type') if err else None!r} in {err[-1].get('module') if err else None!r}, mark why {mark.get('why')!r}, host "
      f"{mark.get('process', {}).get('host')!r}, mem of the error "
      f"{json.dumps(err[-1].get('mem')) if err else None}")
sys.exit(0 if ok else 1)
EOF
	[ "${PIPESTATUS[0]}" = 0 ] || fail=1
fi
if ls "$DIR"/evmbpf-"$CLEAN_PID"*.jsonl >/dev/null 2>&1; then
	say "FAIL record: the clean workload $CLEAN_PID (exit $CLEAN_RC) left a file"; fail=1
else
	say "PASS record: the clean workload left no file"
fi
exit $fail
