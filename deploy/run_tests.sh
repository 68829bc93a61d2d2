#!/usr/bin/env bash
# Builds evotune and runs the whole test suite. GPU tests (label "gpu") skip
# themselves where no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
