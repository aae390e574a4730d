#!/usr/bin/env bash
# Runs every test of the project: unit, integration (persistence, kill -9 loops, power
# loss, fault and metadata sweeps, bad files, semantics), CLI and doc tests, then the
# Python package's tests (pytest) against the extension built into target/py-venv.
# REPLAYSTORE_KILLS, REPLAYSTORE_LOOP_KILLS, REPLAYSTORE_CRASH_EXHAUSTIVE and
# REPLAYSTORE_CRASH_IMAGES scale the crash tests up.
set -euo pipefail
cd "$(dirname "$0")"
# Benches are compiled by clippy --all-targets in CI; running them is `cargo bench`.
# Built once with the kill points (src/killpoint.rs: a process aborts at a named point
# between steps only when REPLAYSTORE_KILL_POINT names it), so the tests that kill at
# them run with the rest rather than in a second build.
cargo test --workspace --features replaystore/kill-points --lib --bins --tests
cargo test --workspace --features replaystore/kill-points --doc

# Python: a virtualenv that sees the machine's packages, numpy, pytest and maturin in it
# (installed only when missing), the extension built in place, then pytest. torch (a few
# GB, cached in the venv) runs the DataLoader recipe, which must not skip here.
VENV="$PWD/target/py-venv"
# No wheel cache: the venvs under target/ are the cache. On a clean machine pip would
# otherwise keep a second copy of two torch builds and their CUDA wheels (~7 GB), which
# once filled CI's disk before the DI-engine venv was installed.
export PIP_NO_CACHE_DIR=1
[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
export PATH="$VENV/bin:$PATH"
# gymnasium: Schema.from_spaces is tested against real spaces, not skipped.
# pytest-xdist: the suite runs on two workers (-n 2), most of its time being waits on
# child processes, Ray and trainers.
"$VENV/bin/python" -c 'import numpy, pytest, xdist, gymnasium, pyarrow, pandas' 2>/dev/null \
  || "$VENV/bin/python" -m pip install --quiet numpy pytest pytest-xdist gymnasium pyarrow pandas
command -v maturin >/dev/null || "$VENV/bin/python" -m pip install --quiet maturin
# torch pinned with torchrl (PEERS below): TorchRL's C++ sum trees are built against one
# torch, and with a newer one its PrioritizedSampler does not load (issue 56).
TORCH=torch==2.15.0
"$VENV/bin/python" -c 'import torch' 2>/dev/null || "$VENV/bin/python" -m pip install --quiet "$TORCH"
export REPLAYSTORE_REQUIRE_TORCH=1
# The libraries the compat adapters replace, pinned (python/tests/peers.py): the
# differential tests drive them beside the adapters, and must run here, not skip.
PEERS=(cpprb==11.0.0 hypothesis==6.170.15 stable-baselines3==2.9.2 tianshou==2.0.1 "ray[rllib]==2.60.0"
       "$TORCH" torchrl==0.14.1)
"$VENV/bin/python" -m pip install --quiet "${PEERS[@]}"
# UnstableBaselines (unstable-rl) requires vLLM and a GPU stack for its learners; its
# buffers need only what is named here, so it is installed without its requirements
# (python/tests/peers.py imports its buffer module past its package's __init__).
"$VENV/bin/python" -m pip install --quiet --no-deps unstable-rl==0.2.2
# JAX and flashbax: replaystore.jax's arrays and flashbax-shaped buffers are tested beside
# flashbax's own (CPU jaxlib; flax is what flashbax's prioritised buffers import).
"$VENV/bin/python" -m pip install --quiet jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 flashbax==0.1.3
# wandb and tensorboard: replaystore.integrations is tested against both.
"$VENV/bin/python" -m pip install --quiet trueskill dm-tree rich wandb tensorboard
export REPLAYSTORE_REQUIRE_PEERS=1
# SB3's logger makes a folder per learn() in the temporary directory unless told where.
export SB3_LOGDIR="$PWD/target/sb3-logs"
(cd python && VIRTUAL_ENV="$VENV" maturin develop --quiet)
# DI-engine pins numpy<2, which Ray's pyarrow cannot run with: its tests run in a
# virtualenv of their own (below), and skip here saying so.
# JAX starts threads when imported, and a process that forks after that may deadlock:
# replaystore.jax and its tests run in a pytest of their own, after the suite's forks.
REPLAYSTORE_PEERS_ELSEWHERE=ding "$VENV/bin/python" -m pytest -q -rs -n 2 --doctest-modules \
  --ignore=python/replaystore/compat/ding --ignore=python/replaystore/jax.py \
  --ignore=python/tests/test_jax.py python/replaystore python/tests
"$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider --doctest-modules \
  python/replaystore/jax.py python/tests/test_jax.py

# DI-engine's virtualenv (cached under target/ like the other): DI-engine, its torch and
# numpy<2, the extension built into it, then the DI-engine adapter's doctests and tests.
# Its torch is pinned too: DI-engine requires setuptools<=66.1.1, and torch 2.12.1 is the
# newest torch that allows it (2.15.0, the other venv's, needs setuptools>=77).
DI_VENV="$PWD/target/di-venv"
[ -x "$DI_VENV/bin/python" ] || python3 -m venv "$DI_VENV"
"$DI_VENV/bin/python" -m pip install --quiet DI-engine==0.5.3 torch==2.12.1 pytest hypothesis==6.170.15
(cd python && VIRTUAL_ENV="$DI_VENV" maturin develop --quiet)
# The adapters' folder sweep runs its DI-engine case here, where DI-engine is.
"$DI_VENV/bin/python" -m pytest -q -p no:cacheprovider --doctest-modules \
  python/replaystore/compat/ding python/tests/test_ding_differential.py \
  "python/tests/test_adapter_folders.py::test_every_adapter_file_ignores_links_fifos_and_the_users_folders[ding_deque]"

# The libraries' own buffer tests (python/conformance/sources.toml), where fetched into
# target/upstream/ (`python python/conformance/run.py fetch`; CI has no network for it):
# each suite runs on the library and on the adapter, and the share of the library's
# passing cases that pass on the adapter is printed. Absent suites are named, skipped.
"$VENV/bin/python" python/conformance/run.py run --python main="$VENV/bin/python" \
  --python ding="$DI_VENV/bin/python"
