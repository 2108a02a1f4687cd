#!/usr/bin/env bash
# Trace the embedded demo workload with evmbpf, then read the trace as a user would.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${DEMO_OUT:-/tmp/evmbpf-demo.jsonl}
rm -f "$out"
echo "== sudo evmbpf --out $out -- python3 scripts/demo_workload.py"
./build/evmbpf --out "$out" -- /usr/bin/python3 scripts/demo_workload.py
echo "== the workload exited with $? (it fails on purpose in its fourth forward)"
echo
echo "== evmbpf summarize $out"
./build/evmbpf summarize "$out"
echo
echo "== evmbpf show $out --forward 4 --module 'layers\.0'"
./build/evmbpf show "$out" --forward 4 --module 'layers\.0'
