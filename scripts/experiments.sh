#!/bin/sh
# The experiment suite: every shipped scenario, short (times × 0.1, a few
# minutes) or full (as written, ~35 min). Reports go to results/suite-<mode>/.
# Timing runs hold /tmp/tessera-machine.lock so they never overlap another
# benchmark on a shared machine.
#   scripts/experiments.sh short|full
set -eu
mode=${1:-short}
case "$mode" in
short) scale=0.1 ;;
full) scale=1 ;;
*) echo "usage: $0 short|full" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
cargo build --release -p tessera-cli
tessera=${CARGO_TARGET_DIR:-target}/release/tessera
out=results/suite-$mode
mkdir -p "$out"
for scenario in scenarios/*.toml; do
    name=$(basename "$scenario" .toml)
    echo "== $name" >&2
    flock /tmp/tessera-machine.lock "$tessera" run "$scenario" --scale "$scale" --out "$out/$name"
done
echo "reports: $out/*/README.md" >&2
