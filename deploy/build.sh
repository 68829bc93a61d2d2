#!/usr/bin/env bash
# Configures and builds evotune (binaries in BUILD_DIR/bin).
#   deploy/build.sh [BUILD_DIR [CMAKE_ARGS...]]   (default: build/)
# CMAKE_ARGS apply when BUILD_DIR is first configured.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift $(( $# > 0 ? 1 : 0 ))
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
[ -f "$dir/CMakeCache.txt" ] ||
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$dir" -j"$(nproc)"
