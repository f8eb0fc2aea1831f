#!/usr/bin/env bash
# Every test: set up, build once, run the whole suite (privileged tests need
# root and fail, rather than skip, under CI=true), then the loom models.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
start=$SECONDS
# No module circle inside the crates whose layout docs/architecture.md sets.
for crate in experiments cli; do
  python3 scripts/module-circles.py "crates/$crate/src"
done
# The programs the tests start (tessera, tessera-jack-peer,
# tessera-thread-probe) are built first: `cargo test` builds a package's
# binaries only for that package's own tests. The tests are built in the
# same build, so that every dependency is built once, with the features the
# tests' dev-dependencies add: after a build of `--bins` alone, which
# resolves features without them, `cargo test` built 90 crates again
# (13 minutes on 2 cores).
# A machine runs this once from a clean tree: incremental compilation's
# cache (1.8 GB) would only be written, never read.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo build --workspace --locked --bins --tests 2>&1
cargo test --workspace --locked --no-fail-fast 2>&1
# The lock-free structures' model checks build with --cfg loom in a target
# directory of their own, so the main build is not invalidated.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --locked --release -p tessera-graph --test loom 2>&1
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test --locked --release -p tessera-channel --test loom 2>&1
echo "tests: all passed in $((SECONDS - start)) s"
