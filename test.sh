#!/usr/bin/env bash
# Runs every test of the project: unit, integration (persistence, kill -9, bad files,
# semantics), CLI and doc tests. REPLAYSTORE_KILLS sets the kill -9 cycles (default 150).
set -euo pipefail
cd "$(dirname "$0")"
# Benches are compiled by clippy --all-targets in CI; running them is `cargo bench`.
cargo test --workspace --lib --bins --tests
cargo test --workspace --doc
