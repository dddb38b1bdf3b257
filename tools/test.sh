#!/usr/bin/env bash
# tools/test.sh [PYTEST ARGS]: set up .venv (tools/setup.sh test), build, and run every test:
# C++ (GoogleTest via CTest), lint, pytest, then the transformers catalog's tests on the oldest,
# the GPU image's and the newest transformers release (tools/compat_matrix.sh --ci; its venvs are
# cached in .cache/compat), and the unity build tools/demo.sh compiles. What CI runs (.ci/run)
# and README.md's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh test

echo "== C++ core (GoogleTest via CTest)"
ctest --test-dir build/tests --output-on-failure --no-tests=error -j "$(nproc)"

echo "== lint"
ruff check src tests benchmarks examples

echo "== Python (pytest)"
# One worker per core (the suite is safe in xdist workers); a -n among the arguments wins.
python -m pytest -q -n "$(nproc)" "$@"

echo "== transformers releases (tools/compat_matrix.sh --ci)"
bash tools/compat_matrix.sh --ci

# tools/demo.sh builds the package as a unity build on machines without a GPU: file-local names
# that clash between sources break only that build (it broke the README's main job once).
echo "== unity build (what tools/demo.sh compiles without a GPU)"
python -m pip wheel -q --no-deps -w build/unity/wheel -C build-dir=build/unity \
    -C cmake.define.TPA_WITH_CUDA=OFF -C cmake.define.CMAKE_UNITY_BUILD=ON .
