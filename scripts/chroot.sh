#!/usr/bin/env bash
# Debian chroots for evmbpf's version matrix (see DESIGN.md, "Test matrix").
#
#   scripts/chroot.sh ensure NAME      build NAME unless a complete build is cached
#   scripts/chroot.sh path NAME        print its directory (whether built or not)
#   scripts/chroot.sh run NAME CMD...  run CMD inside NAME (builds it first if needed)
#   scripts/chroot.sh list             the known names and whether each is built
#
# NAME is one of:
#   bullseye   python3.9  + torch 1.7.1
#   trixie     python3.13 + torch 2.6
#   sid        python3.14 + torch 2.14 + transformers (+ python3-dev and gcc, for the
#              3.14 headers that scripts/measure-pyoffsets.sh compiles against)
#
# Chroots are cached under $EVMBPF_CHROOTS (default /var/cache/evmbpf/chroots), outside
# the repo. A build goes into a temporary directory, is checked (python3 runs and imports
# torch), gets a stamp file, and only then is renamed into place: a directory without a
# matching stamp is incomplete and is rebuilt. The mirror is the host's own Debian mirror,
# read from /etc/apt/sources.list(.d); override with EVMBPF_DEBIAN_MIRROR.
#
# `run` works in a private mount namespace (unshare -m): /proc, /dev and /sys are
# bind-mounted into the chroot there, and vanish with the namespace when CMD exits, so
# nothing leaks or stacks up on the host. The command keeps the pid of this script
# (everything is exec'd), so `scripts/chroot.sh run sid python3 x.py & pid=$!` gives the
# target's pid as the host sees it. Inside the chroot:
#   /evmbpf/main    this repository (read-write)
#   /evmbpf/shared  ../shared beside it (the reference tracer lives in shared/reference)
# so relative paths between the two keep working. The working directory is the
# corresponding place under /evmbpf/main when the caller stands inside the repo, else /.
# Extra binds: EVMBPF_CHROOT_BIND="HOSTDIR:GUESTDIR ..." (GUESTDIR is created).
# Root is needed for everything but `path`.
set -euo pipefail

ROOT_DIR="${EVMBPF_CHROOTS:-/var/cache/evmbpf/chroots}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
SHARED="$(cd "$REPO/.." && pwd -P)/shared"

die() { echo "chroot.sh: $*" >&2; exit 1; }

# Packages beyond minbase, per chroot (comma-separated, for debootstrap --include).
packages_for() {
	case "$1" in
	# debootstrap cannot pick a provider for dconf-service's "default-dbus-session-bus |
	# dbus-session-bus" (a torch 1.7 dependency through GTK): name one.
	bullseye) echo "python3-torch,dbus-x11" ;;
	trixie)   echo "python3-torch" ;;
	sid)      echo "python3-torch,python3-transformers,python3-dev,gcc,libc6-dev" ;;
	*) die "unknown chroot '$1' (bullseye, trixie, sid)" ;;
	esac
}

# Check run inside a fresh build before it is stamped.
verify_cmd_for() {
	local py='import sys, torch; print(sys.version.split()[0], torch.__version__)'
	case "$1" in
	sid) py="$py; import transformers; print('transformers', transformers.__version__); import sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')), 'no Python.h'" ;;
	esac
	echo "$py"
}

stamp_text() {
	printf 'evmbpf chroot %s\nsuite=%s\npackages=%s\n' "$1" "$1" "$(packages_for "$1")"
}

# The host's Debian mirror: first deb.debian.org-like URI of the main "debian" archive.
host_mirror() {
	if [ -n "${EVMBPF_DEBIAN_MIRROR:-}" ]; then echo "$EVMBPF_DEBIAN_MIRROR"; return; fi
	local uri=""
	# deb822 .sources files: "URIs:" lines of stanzas whose Suites are not -security.
	shopt -s nullglob
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		uri=$(awk '
			BEGIN { RS=""; FS="\n" }
			{
				u=""; s=""
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/)   { u=$i; sub(/^URIs:[ \t]*/, "", u) }
					if ($i ~ /^Suites:/) { s=$i }
				}
				if (u != "" && s !~ /security/ && u ~ /debian\/?$/) { split(u, a, " "); print a[1]; exit }
			}' "$f")
		[ -n "$uri" ] && break
	done
	if [ -z "$uri" ]; then
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -r "$f" ] || continue
			uri=$(awk '$1 == "deb" {
				for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { u=$i; break }
				if (u ~ /debian\/?$/ && u !~ /security/) { print u; exit } }' "$f")
			[ -n "$uri" ] && break
		done
	fi
	shopt -u nullglob
	[ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list(.d); set EVMBPF_DEBIAN_MIRROR"
	echo "${uri%/}"
}

chroot_path() { packages_for "$1" >/dev/null; echo "$ROOT_DIR/$1"; }

is_complete() {
	local dir; dir=$(chroot_path "$1")
	[ -f "$dir/.evmbpf-stamp" ] && [ "$(cat "$dir/.evmbpf-stamp")" = "$(stamp_text "$1")" ]
}

# Refuse to delete a directory something is still mounted under.
no_mounts_under() {
	local dir; dir=$(readlink -f "$1")
	if awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { found=1 } END { exit !found }' /proc/self/mounts; then
		die "something is mounted under $dir; unmount it first"
	fi
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root"; }

ensure_debootstrap() {
	command -v debootstrap >/dev/null && return
	echo "chroot.sh: installing debootstrap" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

# Mount the pseudo file systems and binds under $1, in the current (private) namespace.
# Used through `unshare -m` only.
setup_mounts() {
	local dir=$1
	mount --rbind /proc "$dir/proc"
	mount --rbind /dev "$dir/dev"
	mount --rbind /sys "$dir/sys"
	mkdir -p "$dir/evmbpf/main" "$dir/evmbpf/shared"
	mount --bind "$REPO" "$dir/evmbpf/main"
	[ -d "$SHARED" ] && mount --bind "$SHARED" "$dir/evmbpf/shared"
	local b
	for b in ${EVMBPF_CHROOT_BIND:-}; do
		mkdir -p "$dir/${b#*:}"
		mount --bind "${b%%:*}" "$dir/${b#*:}"
	done
}

build() {
	local name=$1 dir tmp mirror pkgs log
	need_root
	dir=$(chroot_path "$name")
	mkdir -p "$ROOT_DIR"
	pkgs=$(packages_for "$name")
	mirror=$(host_mirror)
	ensure_debootstrap
	tmp="$ROOT_DIR/.$name.tmp.$$"
	# Leftovers of interrupted builds (we hold the lock: nobody else is building NAME).
	local stale
	for stale in "$ROOT_DIR/.$name.tmp."* "$ROOT_DIR/.$name.old."* "$dir"; do
		[ -e "$stale" ] || continue
		[ "$stale" = "$dir" ] && is_complete "$name" && continue
		no_mounts_under "$stale"
		echo "chroot.sh: removing incomplete $stale" >&2
		rm -rf "$stale"
	done
	echo "chroot.sh: building $name from $mirror with $pkgs into $tmp" >&2
	local t0=$SECONDS
	# debootstrap mounts /proc and /sys in the target itself; keep those in a namespace.
	unshare -m --propagation private \
		debootstrap --variant=minbase --include="$pkgs" "$name" "$tmp" "$mirror" >&2 \
		|| { rm -rf "$tmp"; die "debootstrap $name failed"; }
	cp /etc/resolv.conf "$tmp/etc/resolv.conf" 2>/dev/null || true
	# Never start services from package scripts run inside later.
	printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"; chmod +x "$tmp/usr/sbin/policy-rc.d"
	apt-get clean -o RootDir="$tmp" 2>/dev/null || rm -f "$tmp"/var/cache/apt/archives/*.deb
	echo "chroot.sh: verifying $name" >&2
	# shellcheck disable=SC2016
	unshare -m --propagation private bash -c '
		set -e; dir=$1; shift
		mount --rbind /proc "$dir/proc"; mount --rbind /dev "$dir/dev"; mount --rbind /sys "$dir/sys"
		exec chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"
	' verify "$tmp" python3 -c "$(verify_cmd_for "$name")" >&2 \
		|| { no_mounts_under "$tmp"; rm -rf "$tmp"; die "verification of $name failed"; }
	stamp_text "$name" > "$tmp/.evmbpf-stamp"
	date -u +built=%Y-%m-%dT%H:%M:%SZ >> "$tmp/.evmbpf-stamp.info"
	echo "seconds=$((SECONDS - t0))" >> "$tmp/.evmbpf-stamp.info"
	echo "mirror=$mirror" >> "$tmp/.evmbpf-stamp.info"
	if [ -e "$dir" ]; then
		no_mounts_under "$dir"
		mv "$dir" "$ROOT_DIR/.$name.old.$$"
		rm -rf "$ROOT_DIR/.$name.old.$$"
	fi
	mv "$tmp" "$dir"
	echo "chroot.sh: $name ready in $dir ($((SECONDS - t0)) s)" >&2
}

ensure() {
	local name=$1
	is_complete "$name" && return 0
	need_root
	mkdir -p "$ROOT_DIR"
	# One builder per name; a second caller waits and then finds it complete.
	exec 9>"$ROOT_DIR/.$name.lock"
	flock 9
	is_complete "$name" || build "$name"
	flock -u 9
	exec 9>&-
}

run() {
	local name=$1; shift
	[ $# -gt 0 ] || die "run $name: no command"
	ensure "$name"
	local dir cwd=/
	dir=$(chroot_path "$name")
	case "$(pwd -P)/" in
		"$REPO"/*) cwd="/evmbpf/main${PWD#"$REPO"}" ;;
	esac
	local setup
	setup=$(declare -f setup_mounts)
	# shellcheck disable=SC2016
	exec unshare -m --propagation private env REPO="$REPO" SHARED="$SHARED" \
		EVMBPF_CHROOT_BIND="${EVMBPF_CHROOT_BIND:-}" bash -c '
		set -e; '"$setup"'
		dir=$1; cwd=$2; shift 2
		setup_mounts "$dir"
		exec chroot "$dir" /usr/bin/env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c '\''cd "$0" 2>/dev/null || cd /; exec "$@"'\'' "$cwd" "$@"
	' chroot-run "$dir" "$cwd" "$@"
}

cmd=${1:-}
case "$cmd" in
ensure) [ $# -eq 2 ] || die "usage: $0 ensure NAME"; ensure "$2" ;;
path)   [ $# -eq 2 ] || die "usage: $0 path NAME"; chroot_path "$2" ;;
run)    [ $# -ge 3 ] || die "usage: $0 run NAME CMD..."; shift; run "$@" ;;
list)
	for n in bullseye trixie sid; do
		if is_complete "$n"; then echo "$n $(chroot_path "$n") built"; else echo "$n $(chroot_path "$n") missing"; fi
	done ;;
mirror) host_mirror ;;
*) die "usage: $0 ensure|path|run|list NAME [CMD...]" ;;
esac
