# tools/setup.sh PROFILE: sourced by tools/demo.sh (`demo`) and tools/test.sh (`test`); leaves
# .venv activated.
#   demo: turbo_physai, torch (the CPU wheel on this machine's disk when none is installed) and
#         transformers; matplotlib too with DEMO_PLOT=1 (demo.sh --plot). No apt, no test
#         packages; CUDA kernels only where a GPU is (elsewhere a unity build: 42 s of CPU
#         instead of 71).
#   test: what CI needs: GoogleTest and ninja (apt, when missing), the torch/torchvision pair
#         timm needs, ruff, the test and demo extras. The package's build also builds the C++
#         tests into build/tests (the core compiles once, CUDA kernels included where nvcc is).
# A profile installs again only when a source file changed since its last install (a stamp in
# .venv), so a second run starts at once.
tpa_profile=${1:?usage: source tools/setup.sh demo|test}

if [ "$tpa_profile" = test ] && { [ ! -f /usr/include/gtest/gtest.h ] || ! command -v ninja >/dev/null; }; then
    apt-get update -qq && apt-get install -y -qq libgtest-dev ninja-build >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
source .venv/bin/activate

tpa_stamp=.venv/turbo_physai-$tpa_profile.stamp
tpa_stale() {
    [ ! -f "$tpa_stamp" ] && return 0
    [ "$tpa_profile" = test ] && [ ! -f build/tests/CTestTestfile.cmake ] && return 0
    local sources=(pyproject.toml CMakeLists.txt csrc src)
    [ "$tpa_profile" = test ] && sources+=(tests/cpp)
    [ -n "$(find "${sources[@]}" -newer "$tpa_stamp" -type f \
        \( -name '*.py' -o -name '*.pyi' -o -name '*.[ch]' -o -name '*.[ch]pp' -o -name '*.cu' \
        -o -name '*.cuh' -o -name '*.yaml' -o -name '*.toml' -o -name '*.txt' \) -print -quit)" ]
}

# The requirements of pyproject.toml's dependencies and the named extras (matplotlib only when
# asked for), one a line; nothing where Python has no tomllib (3.10): pip then resolves them
# from the package's own metadata, only later.
tpa_requirements() {
    python - "$@" <<'EOF' 2>/dev/null || true
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
plot = bool(sys.argv[1:] and sys.argv[1] == "plot")
for req in project["dependencies"] + [r for e in sys.argv[1:] if e in extras for r in extras[e]]:
    if plot or not req.startswith("matplotlib"):
        print(req)
EOF
}

tpa_install_demo() {
    local cuda=OFF unity=ON wheels=build/demo/wheel build wheel torch=() deps=()
    if nvidia-smi -L >/dev/null 2>&1; then cuda=ON unity=OFF; fi
    rm -rf "$wheels"
    # The C++ build (CPU) runs while pip fetches and unpacks the dependencies (mostly waiting).
    python -m pip wheel -q --no-deps -w "$wheels" -C build-dir=build/demo \
        -C cmake.define.TPA_WITH_CUDA=$cuda -C cmake.define.CMAKE_UNITY_BUILD=$unity . &
    build=$!
    # torch==2.13.0 is the CPU wheel this machine kind keeps on disk; an installed torch stays.
    python -c 'import importlib.util as u, sys; sys.exit(not u.find_spec("torch"))' ||
        torch=(torch==2.13.0)
    mapfile -t deps < <(tpa_requirements demo ${DEMO_PLOT:+plot})
    python -m pip install -q --no-compile "${torch[@]}" "${deps[@]}"
    wait "$build"
    wheel=$(ls "$wheels"/turbo_physai-*.whl)
    python -m pip install -q --no-compile --force-reinstall --no-deps "$wheel"
    [ ${#deps[@]} -gt 0 ] || python -m pip install -q --no-compile "$wheel[demo]"
}

tpa_install_test() {
    local cuda=OFF
    command -v nvcc >/dev/null && cuda=ON
    # Pinned to the torch/torchvision pair this machine kind keeps on disk (no download): timm
    # needs torchvision, and PyPI's torchvision does not import beside the CPU-only torch 2.13.
    python -m pip install -q torch==2.14.1 torchvision==0.29.1 ruff
    python -m pip install -q -C build-dir=build/tests -C cmake.define.TPA_BUILD_TESTS=ON \
        -C cmake.define.TPA_BUILD_PYTHON=ON -C cmake.define.TPA_WITH_CUDA=$cuda ".[test,demo]"
}

if tpa_stale; then
    "tpa_install_$tpa_profile"
    touch "$tpa_stamp"
fi
if [ -n "${DEMO_PLOT:-}" ] && ! python -c 'import matplotlib' 2>/dev/null; then
    python -m pip install -q --no-compile "$(tpa_requirements demo plot | grep '^matplotlib')"
fi
