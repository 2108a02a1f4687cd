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
  libpython3.11-dev                       # tests: an embedder of the shared libpython3.11
  chromium                                # tests/test_export.py: speedscope in a browser
)
# npm for the speedscope web app (a Node.js of another origin may bring its own npm)
command -v npm >/dev/null 2>&1 || packages+=(npm)

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

# The speedscope web app (its npm package's build), which tests/test_export.py loads
# exported files into; outside the repository, installed once.
NPM_CACHE=${EVMBPF_NPM_CACHE:-/var/cache/evmbpf/npm}
if [ "$(id -u)" = 0 ] && command -v npm >/dev/null 2>&1 &&
   [ ! -e "$NPM_CACHE/node_modules/speedscope/dist/release/index.html" ]; then
  mkdir -p "$NPM_CACHE"
  npm install --silent --no-audit --no-fund --prefix "$NPM_CACHE" speedscope@1.25.0 >/dev/null ||
    echo "install-deps: npm could not install speedscope; tests/test_export.py skips its browser test" >&2
fi

# The CUPTI agent's headers (cupti.h, cuda.h) from Debian's non-free archive, unpacked
# under /var/cache/evmbpf/cupti; without them the agent's build and tests are skipped.
if [ "$(id -u)" = 0 ]; then
  "$(dirname "$0")/cupti-headers.sh" ensure >/dev/null ||
    echo "install-deps: no CUPTI headers; the CUPTI agent (--cupti) is not built" >&2
fi
