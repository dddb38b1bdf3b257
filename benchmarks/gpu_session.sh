#!/usr/bin/env bash
# One call on the lent GPU machine: build with CUDA for sm_90a, the GPU tests on the image's own
# packages and again on carried transformers wheels, then the benchmarks. Device time is scarce
# (benchmarks/README: one script per call), so everything goes into one run.
#
#   TESTS="tests/ops tests/kernels tests/catalogs" \
#   BENCH="python3 benchmarks/quant_cuda.py; python3 benchmarks/e2e_ultralytics.py" \
#   bash benchmarks/gpu_session.sh
#
# Wheels in .whl/ (py3.12, for the image's missing host libraries: benchmarks/gpu_wheels.txt says
# which and how to download them) are installed with --no-deps into /tmp/site; a transformers wheel among them goes to its own folder and is used only for the
# second test pass (TESTS_CARRIED, default tests/catalogs). Logs and every result file the run
# writes come back as $OUT/gpu_session.tar.gz; the summary is printed last. PYTEST_ARGS go to
# both test passes (e.g. "-n 4": the GPU is shared by the workers). ONLY_IDS=FILE (node IDs, one
# per line) keeps only those tests of the image pass (benchmarks/pytest_only.py): a rerun of what
# a timed-out pass never reached.
#
# Every step runs under `timeout`, within DEADLINE seconds of the start (default 540: the device
# tool kills a command at 600 s, and then nothing comes back); TEST_TIMEOUT (default 240) and
# BENCH_TIMEOUT (default 300) cap a test pass and a benchmark. What a killed step wrote so far
# (its log, result files) still comes back.
set -uo pipefail
OUT=${OUT:-$PWD/build/gpu-out}
mkdir -p "$OUT" build
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
logs=build/gpu-logs
mkdir -p "$logs"
touch build/gpu-session.start
start=$SECONDS
summary=()
# seconds a step may take: its own cap, or what is left before the deadline (minus packing time)
budget() { local left=$((${DEADLINE:-540} - (SECONDS - start) - 15)); echo $((left < $1 ? left : $1)); }
note() { summary+=("$*"); echo "== $*"; }

pip_target() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$@"
}
site=/tmp/site carried=/tmp/carried-transformers
mapfile -t wheels < <(ls .whl/*.whl 2>/dev/null | grep -v '/transformers-')
[ ${#wheels[@]} -gt 0 ] && pip_target "$site" "${wheels[@]}"
carried_tf=$(ls .whl/transformers-*.whl 2>/dev/null | head -1)
[ -n "$carried_tf" ] && pip_target "$carried" "$carried_tf"
export PYTHONPATH=$PWD/src:$site

if ! timeout "$(budget 300)" bash -c 'cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPA_WITH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90a -DPython_EXECUTABLE="$(command -v python3)" &&
       cmake --build build/gpu' >"$logs/build.log" 2>&1; then
    tail -40 "$logs/build.log"
    note "build FAILED"
fi
python3 - <<'EOF' 2>&1 | tee "$logs/env.txt"
import torch, transformers, turbo_physai._core as core
print("torch", torch.__version__, "transformers", transformers.__version__,
      torch.cuda.get_device_name(), "core has CUDA:", hasattr(core, "fake_quant_fp8_cuda"))
EOF

run_tests() {  # name, extra PYTHONPATH, paths...
    local name=$1 extra=$2 only=()
    shift 2
    [ -n "${ONLY_IDS:-}" ] && [ "$name" = image ] && only=(-p pytest_only)
    extra=$extra${ONLY_IDS:+$PWD/benchmarks:}
    # shellcheck disable=SC2086
    # SIGINT first: pytest then prints its summary with the test it was in
    PYTHONPATH=$extra$PYTHONPATH timeout -s INT -k 20 "$(budget "${TEST_TIMEOUT:-240}")" \
        env TPA_ONLY_IDS="${ONLY_IDS:-}" python3 -m pytest "$@" "${only[@]}" ${PYTEST_ARGS:-} -q \
        -p no:cacheprovider -rfE \
        --junitxml="$logs/pytest-$name.xml" >"$logs/pytest-$name.log" 2>&1
    note "pytest $name ($*): $(tail -1 "$logs/pytest-$name.log")"
    grep -E '^(FAILED|ERROR) ' "$logs/pytest-$name.log" | head -20
}
# shellcheck disable=SC2086
[ -n "${TESTS-tests/ops tests/kernels tests/catalogs}" ] &&
    run_tests image "" ${TESTS-tests/ops tests/kernels tests/catalogs}
# shellcheck disable=SC2086
[ -n "$carried_tf" ] && [ -n "${TESTS_CARRIED-tests/catalogs}" ] &&
    run_tests carried "$carried:" ${TESTS_CARRIED-tests/catalogs}

if [ -n "${BENCH:-}" ]; then
    IFS=';' read -ra benches <<<"$BENCH"
    for i in "${!benches[@]}"; do
        cmd=${benches[$i]}
        timeout "$(budget "${BENCH_TIMEOUT:-300}")" bash -c "$cmd" >"$logs/bench-$i.log" 2>&1
        note "bench [$cmd] rc=$?"
        tail -25 "$logs/bench-$i.log"
    done
fi

find benchmarks/results -newer build/gpu-session.start -type f >"$logs/results.txt"
tar czf "$OUT/gpu_session.tar.gz" "$logs" $(cat "$logs/results.txt")
printf '%s\n' "${summary[@]}"
