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
MIRROR="${EVMBPF_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PKGS="libtorch-cuda-2.6 libcudart12"
STAMP_WANT="trixie $PKGS"

die() { echo "torch-cuda.sh: $*" >&2; exit 1; }

complete() { [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "$STAMP_WANT" ]; }

ensure() {
	complete && return 0
	[ "$(id -u)" = 0 ] || die "run as root to fetch into $DIR"
	mkdir -p "$(dirname "$DIR")"
	exec 9>"$DIR.lock"
	flock 9
	complete && return 0
	local work; work="$(mktemp -d "$DIR.tmp.XXXXXX")"
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/debs" "$work/x" "$work/apt/empty" "$work/out/lib"
	echo "deb [trusted=yes] $MIRROR trixie contrib non-free" > "$work/apt/sources.list"
	local opts=(-o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts="$work/apt/empty"
		-o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache"
		-o Dir::Etc::Preferences="$work/apt/empty/none" -o Dir::Etc::PreferencesParts="$work/apt/empty" -o APT::Sandbox::User=root
		-o APT::Architecture=amd64 -o Acquire::Languages=none -o Debug::NoLocking=1)
	apt-get -q "${opts[@]}" update >&2 || die "apt-get update of trixie contrib/non-free failed"
	(cd "$work/debs" && apt-get -q "${opts[@]}" download $PKGS >&2) || die "apt-get download $PKGS failed"
	local deb
	for deb in "$work"/debs/*.deb; do dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" --wildcards '*libc10_cuda.so*' '*libcudart.so*' '*libc10.so*' 2>/dev/null || true; done
	local f
	for f in libc10_cuda.so.2.6 libc10.so.2.6 libcudart.so.12; do
		local src; src="$(find "$work/x" -name "$f" \( -type f -o -type l \) | head -1)"
		[ -n "$src" ] || die "$f not found in $PKGS"
		cp -L "$src" "$work/out/lib/$f"
	done
	ls "$work"/debs/*.deb | xargs -n1 basename > "$work/out/debs"
	echo "$STAMP_WANT" > "$work/out/stamp"
	rm -rf "$DIR"
	mv "$work/out" "$DIR"
}

case "${1:-}" in
ensure) ensure; echo "$DIR" ;;
path) echo "$DIR" ;;
*) die "usage: torch-cuda.sh ensure|path" ;;
esac
