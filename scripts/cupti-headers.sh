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
PKGS="libcupti-dev nvidia-cuda-dev"
STAMP_WANT="trixie $PKGS headers"

DEBS_WHO=cupti-headers.sh
. "$(dirname "$0")/debian-debs.sh"
die() { debs_die "$@"; }

ensure() {
	debs_cached "$DIR" "$STAMP_WANT" && return 0
	debs_begin "$DIR" "$STAMP_WANT" || return 0
	debs_fetch trixie non-free $PKGS
	dpkg-deb -x "$WORK"/debs/libcupti-dev_*.deb "$WORK/x"
	dpkg-deb --fsys-tarfile "$WORK"/debs/nvidia-cuda-dev_*.deb |
		tar -x -C "$WORK/x" --wildcards --no-wildcards-match-slash \
			'./usr/include/*.h' './usr/include/crt/*' ||
		die "cannot unpack nvidia-cuda-dev's headers"
	[ -f "$WORK/x/usr/include/cupti.h" ] && [ -f "$WORK/x/usr/include/cuda.h" ] ||
		die "cupti.h or cuda.h missing from $PKGS"
	mv "$WORK/x/usr/include" "$WORK/out/include"
	debs_finish "$DIR" "$STAMP_WANT"
}

case "${1:-}" in
ensure) ensure; echo "$DIR/include" ;;
path) echo "$DIR/include" ;;
*) die "usage: cupti-headers.sh ensure|path" ;;
esac
