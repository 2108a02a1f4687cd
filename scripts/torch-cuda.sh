#!/usr/bin/env bash
# Debian trixie's CUDA build of torch 2.6, unpacked (never installed) for the tests that
# check the CUDA allocator discovery against a real libc10_cuda.so without a GPU.
#
#   scripts/torch-cuda.sh ensure   fetch and unpack unless a complete copy is cached
#   scripts/torch-cuda.sh path     print the directory (whether fetched or not)
#
# Fetches libtorch-cuda-2.6 (contrib, ~480 MB) and libcudart12 (non-free, ~180 kB) with
# apt-get download from a private apt configuration (the host's own sources are not
# touched), and unpacks them with dpkg-deb -x: their maintainer scripts (which would
# download cuDNN from outside) never run. Only libc10_cuda.so.2.6 and libcudart.so.12 are
# kept (~2 MB), with the CUDA build's libc10.so.2.6 beside them; a process that has
# imported the trixie chroot's CPU torch 2.6 (the same source) already has a
# libc10.so.2.6, which libc10_cuda.so then uses by its soname. Cached under $EVMBPF_TORCH_CUDA (default
# /var/cache/evmbpf/torch-cuda); a stamp marks a complete copy; a lock serialises
# concurrent callers. Mirror: EVMBPF_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

DIR="${EVMBPF_TORCH_CUDA:-/var/cache/evmbpf/torch-cuda}"
PKGS="libtorch-cuda-2.6 libcudart12"
STAMP_WANT="trixie $PKGS"

DEBS_WHO=torch-cuda.sh
. "$(dirname "$0")/debian-debs.sh"
die() { debs_die "$@"; }

ensure() {
	debs_cached "$DIR" "$STAMP_WANT" && return 0
	debs_begin "$DIR" "$STAMP_WANT" || return 0
	mkdir -p "$WORK/out/lib"
	debs_fetch trixie "contrib non-free" $PKGS
	local deb
	for deb in "$WORK"/debs/*.deb; do dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$WORK/x" --wildcards '*libc10_cuda.so*' '*libcudart.so*' '*libc10.so*' 2>/dev/null || true; done
	local f
	for f in libc10_cuda.so.2.6 libc10.so.2.6 libcudart.so.12; do
		local src; src="$(find "$WORK/x" -name "$f" \( -type f -o -type l \) | head -1)"
		[ -n "$src" ] || die "$f not found in $PKGS"
		cp -L "$src" "$WORK/out/lib/$f"
	done
	debs_finish "$DIR" "$STAMP_WANT"
}

case "${1:-}" in
ensure) ensure; echo "$DIR" ;;
path) echo "$DIR" ;;
*) die "usage: torch-cuda.sh ensure|path" ;;
esac
