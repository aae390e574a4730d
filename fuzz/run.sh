#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60; CI's amount, longer runs are
# `fuzz/run.sh 3600`) on the stable toolchain: RUSTC_BOOTSTRAP=1 lets cargo-fuzz's
# nightly flags through. Seeds come from the corpus kept in the repo; new finds go to a
# scratch folder, so the repo's corpus stays as committed. Installs cargo-fuzz when
# missing. Any crash fails the script (its input is saved under fuzz/artifacts/).
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install --quiet --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in $(cargo fuzz list); do
  mkdir -p "corpus/$t" "$scratch/$t"
  cargo fuzz run -O "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$secs" -max_len=512 -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 \
    2>"$scratch/$t.log" || { tail -40 "$scratch/$t.log"; exit 1; }
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$t.log" | grep -o '[0-9]*$')"
  echo "fuzz $t: $runs executions in ${secs}s, no crash"
done
