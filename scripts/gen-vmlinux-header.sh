#!/usr/bin/env bash
# Regenerate vmlinux/<arch>/vmlinux.h from a kernel's BTF. The committed header is what
# builds use; regenerate it only when the BPF side needs a type it does not have.
#   scripts/gen-vmlinux-header.sh [BTF-FILE]   (default /sys/kernel/btf/vmlinux)
set -euo pipefail
btf=${1:-/sys/kernel/btf/vmlinux}
arch=$(uname -m); case "$arch" in x86_64) arch=x86;; aarch64) arch=arm64;; esac
out="$(dirname "$0")/../vmlinux/$arch/vmlinux.h"
mkdir -p "$(dirname "$out")"
bpftool btf dump file "$btf" format c > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
