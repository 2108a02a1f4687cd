# Sourced by the scripts that take files out of Debian packages without installing them
# (cupti-headers.sh, torch-cuda.sh): one cached, locked, complete-or-absent copy under a
# directory, filled from .debs that a private apt configuration downloads (the host's
# own sources and package state are not touched; signatures are checked against the
# host's debian-archive-keyring). Mirror: EVMBPF_DEBIAN_MIRROR.
#
#   debs_cached DIR STAMP        whether DIR holds a complete copy made for STAMP
#   debs_begin DIR STAMP         lock DIR; returns 1 if another caller completed it
#                                meanwhile; else sets WORK (a temporary directory with
#                                debs/, x/ and out/, removed at exit)
#   debs_fetch SUITE COMPONENTS PKG...   download the packages into $WORK/debs
#   debs_finish DIR STAMP        $WORK/out becomes DIR, stamped

debs_die() { echo "${DEBS_WHO:-debian-debs}: $*" >&2; exit 1; }

debs_cached() { [ -f "$1/stamp" ] && [ "$(cat "$1/stamp")" = "$2" ]; }

debs_begin() {
	[ "$(id -u)" = 0 ] || debs_die "run as root to fetch into $1"
	mkdir -p "$(dirname "$1")"
	exec 9>"$1.lock"
	flock 9
	debs_cached "$1" "$2" && return 1
	WORK="$(mktemp -d "$1.tmp.XXXXXX")"
	trap 'rm -rf "$WORK"' EXIT
	mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial" "$WORK/apt/empty" \
		"$WORK/debs" "$WORK/x" "$WORK/out"
}

debs_fetch() {
	local suite=$1 components=$2; shift 2
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -f "$keyring" ] || debs_die "no $keyring to check Debian's signatures (apt-get install debian-archive-keyring)"
	echo "deb [signed-by=$keyring] ${EVMBPF_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite $components" \
		> "$WORK/apt/sources.list"
	local opts=(-o Dir::Etc::SourceList="$WORK/apt/sources.list" -o Dir::Etc::SourceParts="$WORK/apt/empty"
		-o Dir::State::Lists="$WORK/apt/lists" -o Dir::Cache="$WORK/apt/cache"
		-o Dir::Etc::Preferences="$WORK/apt/empty/none" -o Dir::Etc::PreferencesParts="$WORK/apt/empty"
		-o APT::Sandbox::User=root -o APT::Architecture=amd64 -o Acquire::Languages=none
		-o Debug::NoLocking=1)
	apt-get -q "${opts[@]}" update >&2 || debs_die "apt-get update of $suite $components failed"
	(cd "$WORK/debs" && apt-get -q "${opts[@]}" download "$@" >&2) ||
		debs_die "apt-get download $* failed"
}

debs_finish() {
	ls "$WORK"/debs/*.deb | xargs -n1 basename > "$WORK/out/debs"
	echo "$2" > "$WORK/out/stamp"
	rm -rf "$1"
	mv "$WORK/out" "$1"
}
