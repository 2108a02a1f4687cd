#!/usr/bin/env bash
# The CUPTI and CUDA headers the CUPTI agent (agent/) is compiled against, from Debian
# trixie's non-free archive, unpacked (never installed): the agent needs headers only at
# build time; it opens libcupti in the target at run time.
#
#   scripts/cupti-headers.sh ensure   fetch and unpack unless a complete copy is cached
#   scripts/cupti-headers.sh path     print the include directory (whether fetched or not)
#
# libcupti-dev (8.6 MB) gives cupti*.h; cuda.h and the runtime's type headers come from
# nvidia-cuda-dev (934 MB: 12-22 s to download here; `ensure` took 2 min in all on a loaded machine),
# of which only usr/include/*.h and usr/include/crt/ are kept (16 MB). Cached under
# $EVMBPF_CUPTI_HEADERS (default /var/cache/evmbpf/cupti); a stamp marks a complete copy;
# a lock serialises concurrent callers. Mirror: EVMBPF_DEBIAN_MIRROR.
set -euo pipefail

DIR="${EVMBPF_CUPTI_HEADERS:-/var/cache/evmbpf/cupti}"
MIRROR="${EVMBPF_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PKGS="libcupti-dev nvidia-cuda-dev"
STAMP_WANT="trixie $PKGS headers"

die() { echo "cupti-headers.sh: $*" >&2; exit 1; }

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
	mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/debs" \
		"$work/x" "$work/out"
	echo "deb [trusted=yes] $MIRROR trixie non-free" > "$work/apt/sources.list"
	local opts=(-o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache"
		-o Dir::Etc::Preferences=/nonexistent -o Dir::Etc::PreferencesParts=/nonexistent
		-o APT::Architecture=amd64 -o Acquire::Languages=none -o Debug::NoLocking=1)
	apt-get -q "${opts[@]}" update >&2 || die "apt-get update of trixie non-free failed"
	(cd "$work/debs" && apt-get -q "${opts[@]}" download $PKGS >&2) || die "apt-get download $PKGS failed"
	dpkg-deb -x "$work"/debs/libcupti-dev_*.deb "$work/x"
	dpkg-deb --fsys-tarfile "$work"/debs/nvidia-cuda-dev_*.deb |
		tar -x -C "$work/x" --wildcards --no-wildcards-match-slash \
			'./usr/include/*.h' './usr/include/crt/*' ||
		die "cannot unpack nvidia-cuda-dev's headers"
	[ -f "$work/x/usr/include/cupti.h" ] && [ -f "$work/x/usr/include/cuda.h" ] ||
		die "cupti.h or cuda.h missing from $PKGS"
	mv "$work/x/usr/include" "$work/out/include"
	ls "$work"/debs/*.deb | xargs -n1 basename > "$work/out/debs"
	echo "$STAMP_WANT" > "$work/out/stamp"
	rm -rf "$DIR"
	mv "$work/out" "$DIR"
}

case "${1:-}" in
ensure) ensure; echo "$DIR/include" ;;
path) echo "$DIR/include" ;;
*) die "usage: cupti-headers.sh ensure|path" ;;
esac
