#!/usr/bin/env bash
# Unpack the Debian source of the installed libcjson-dev into DIR, for `make static`:
# Debian ships cJSON as a shared library only (no libcjson.a), so the static binary
# compiles cJSON.c from the very source package the installed library was built from
# (same version, Debian's patches applied).
#
#   scripts/cjson-source.sh DIR      leaves DIR/cJSON.c and DIR/cJSON.h
#
# The source comes from the host's own Debian mirror (its deb lines, read as deb-src)
# through apt-get source, with a private apt state under DIR: the system's apt
# configuration is not touched, and no root is needed. Needs dpkg-dev (dpkg-source).
set -euo pipefail

die() { echo "cjson-source: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 DIR"
dir=$1

version=$(dpkg-query -W -f='${Version}' libcjson-dev 2>/dev/null) \
	|| die "libcjson-dev is not installed (scripts/install-deps.sh)"
command -v dpkg-source >/dev/null || die "dpkg-source is missing: apt-get install dpkg-dev"
if [ -f "$dir/cJSON.c" ] && [ "$(cat "$dir/.version" 2>/dev/null)" = "$version" ]; then
	exit 0
fi

rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/apt/sources" "$dir/dl"
dir=$(cd "$dir" && pwd -P)

# The host's deb sources (deb822 or one-line), as deb-src. Only Debian's own archives.
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources; do
	awk 'BEGIN { RS=""; FS="\n" }
	     {
		deb = 0; debian = 0; out = ""
		for (i = 1; i <= NF; i++) {
			if ($i ~ /^Types:/) { if ($i ~ /[ \t]deb([ \t]|$)/) deb = 1; $i = "Types: deb-src" }
			if ($i ~ /^URIs:/ && $i ~ /debian(-security)?\/?([ \t]|$)/) debian = 1
			out = out $i "\n"
		}
		if (deb && debian) print out
	     }' "$f" >> "$dir/apt/sources/host.sources"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
	[ -r "$f" ] || continue
	awk '$1 == "deb" && /debian/ { $1 = "deb-src"; print }' "$f" >> "$dir/apt/sources/host.list"
done
shopt -u nullglob
[ -s "$dir/apt/sources/host.sources" ] || [ -s "$dir/apt/sources/host.list" ] \
	|| die "no Debian deb source in /etc/apt/sources.list(.d)"
[ -s "$dir/apt/sources/host.list" ] || rm -f "$dir/apt/sources/host.list"
[ -s "$dir/apt/sources/host.sources" ] || rm -f "$dir/apt/sources/host.sources"

apt=(apt-get -q -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$dir/apt/sources"
     -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache"
     -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
"${apt[@]}" update >"$dir/apt/update.log" 2>&1 \
	|| die "apt-get update of the deb-src lists failed (see $dir/apt/update.log)"
(cd "$dir/dl" && "${apt[@]}" source --download-only "cjson=$version") >"$dir/apt/source.log" 2>&1 \
	|| die "apt-get source cjson=$version failed (see $dir/apt/source.log)"
dsc=$(echo "$dir"/dl/cjson_*.dsc)
[ -f "$dsc" ] || die "no cjson .dsc downloaded (see $dir/apt/source.log)"
(cd "$dir/dl" && dpkg-source -q -x "$dsc" src) >"$dir/apt/extract.log" 2>&1 \
	|| die "dpkg-source -x $dsc failed (see $dir/apt/extract.log)"
cp "$dir/dl/src/cJSON.c" "$dir/dl/src/cJSON.h" "$dir/dl/src/LICENSE" "$dir/"
echo "$version" > "$dir/.version"
rm -rf "$dir/apt/lists" "$dir/apt/cache"
