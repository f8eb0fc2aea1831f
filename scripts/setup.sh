#!/usr/bin/env bash
# Installs what tessera needs on Debian 12 (run as root; idempotent: it
# installs only what is missing and touches nothing else).
set -euo pipefail

packages=(
  build-essential pkg-config   # crates that build C, the jack crate's pkg-config
  util-linux                   # setpriv, chrt, taskset (tests, docs)
  iproute2                     # network namespaces for the network tests
  procps                       # sysctl: a bridge's switch without netfilter
  jackd2 libjack-jackd2-dev    # the JACK2 peer benchmark, audio-server scenarios
  pipewire pipewire-bin pipewire-jack  # audio-server scenarios on PipeWire (pw-metadata, pw-jack), its RTP modules
  linuxptp                     # ptp4l, pmc: the AES67 media clock, PTP between hosts, their tests
  rt-tests                     # cyclictest, to compare wake-up latency with
  stress-ng rt-app             # third-party interference, to cross-check ours
  strace                       # counts libtessera's system calls per interval call (its test)
  faust                        # the seed's DSP compiler, for the synthesizer benchmark
  dbus-daemon dbus-bin systemd # RTKit's interface: private system buses in tests, busctl
  python3-dbus                 # a foreign RTKit client (libdbus) in the tests
  rtkit polkitd                # stock RTKit (and the polkit it asks) for the desktop scenario
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run as root (sudo $0) to install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust with rustup first" >&2; exit 1; }
cargo fetch --locked -q
