#!/usr/bin/env bash
# tools/test.sh: set up a virtual environment, build, and run every test (C++ and Python).
# What CI runs (.ci/run) and what README.md tells a newcomer to run.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh

echo "== C++ core (GoogleTest via CTest)"
cmake -S . -B build/tests -G Ninja -DTPA_BUILD_TESTS=ON -DTPA_BUILD_PYTHON=OFF >/dev/null
cmake --build build/tests -j "$(nproc)"
ctest --test-dir build/tests --output-on-failure -j "$(nproc)"

echo "== lint"
ruff check src tests benchmarks examples

echo "== Python (pytest)"
python -m pytest -q "$@"
