#!/usr/bin/env bash
# The main job: set up, build, and run `tessera demo` (arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -q -p tessera-cli
exec ./target/release/tessera demo "$@"
