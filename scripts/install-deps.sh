#!/usr/bin/env bash
# Install everything evmbpf needs to build and test on a fresh Debian 12 (bookworm) machine.
# Idempotent: packages already present are left alone. Needs root.
set -euo pipefail

packages=(
  make gcc clang llvm pkg-config          # build: gcc for user space, clang for BPF
  libbpf-dev bpftool                      # BPF loading and skeletons
  libelf-dev libdw-dev zlib1g-dev         # symbol lookup in the target's binaries
  libcjson-dev                            # trace reading
  dpkg-dev                                # make static: cJSON's Debian source (dpkg-source)
  mandoc groff-base                       # the man page's lint (tests/test_cli.py)
  libpcre2-dev                            # --modules, show --module: Python re over PCRE2
  python3 python3-pytest python3-torch    # the real target and the test runner
  debootstrap                             # chroots for the version matrix
  python3.11-dbg                          # a debug build, which evmbpf must refuse
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages (${missing[*]}); run as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Some tools (bpftool prog profile, perf) want tracefs; uprobes via perf_event do not.
if [ "$(id -u)" = 0 ] && [ ! -e /sys/kernel/tracing/uprobe_events ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
