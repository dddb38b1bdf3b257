#!/usr/bin/env bash
# tools/compat_matrix.sh [--ci] [--record] [--setup] [RELEASE ...]: the transformers catalog's
# tests (tests/catalogs/test_transformers*.py) on each transformers release, each in its own venv,
# then a table: release, models reached, groups accepted, test result.
#   (no release)  the whole matrix (MATRIX below)
#   --ci          the oldest, the GPU image's (5.17) and the newest release, without the compile
#                 tests (torch's tracing, not the transformers release, is what they exercise):
#                 what tools/test.sh runs
#   --record      after a release's tests pass, record the fingerprints of its MSDA code as
#                 validated (src/turbo_physai/optimizations/common/transformers/validated.json):
#                 how a new release is validated, e.g. `tools/compat_matrix.sh --record 5.25.0`
#   --setup       only create the venvs (warms the cache)
# Venvs live in $TPA_COMPAT_CACHE (.cache/compat): torch 2.14.1 is put there once (see torch_dir)
# and shared by every venv (a .pth file), so a release costs only its own small packages, once. turbo_physai comes from src/ where a dev build left _core there, else
# from the package the calling python imports (tools/test.sh's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

MATRIX=(4.46.3 4.50.3 4.57.6 5.0.0 5.10.4 5.17.0 5.24.0)
CI_RELEASES=(4.46.3 5.17.0 5.24.0)
CACHE=${TPA_COMPAT_CACHE:-.cache/compat}
PY=${PYTHON:-python3}
PYTEST=(-q -p no:cacheprovider tests/catalogs/test_transformers.py tests/catalogs/test_transformers_graph_safe.py
        tests/catalogs/test_transformers_cuda_graph.py)
EVIDENCE=turbo_physai.optimizations.common.transformers.evidence

releases=() record=0 setup=0
for arg in "$@"; do
    case $arg in
        --ci) releases+=("${CI_RELEASES[@]}"); PYTEST+=(-k "not compile") ;;
        --record) record=1 ;;
        --setup) setup=1 ;;
        -*) echo "unknown option $arg" >&2; exit 2 ;;
        *) releases+=("$arg") ;;
    esac
done
[ ${#releases[@]} -gt 0 ] || releases=("${MATRIX[@]}")
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

# torch 2.14.1 and what it needs (the CUDA build: nvidia-* libraries, 5.5 GB unpacked), linked
# from the calling python's environment where it has that release (tools/test.sh's .venv: seconds,
# no space), else installed from the local files (minutes).
link_torch() {
    "$PY" - "$torch_dir" <<'EOF'
import importlib.metadata as md, os, shutil, sys
from pathlib import Path
from packaging.requirements import Requirement

if md.version("torch").split("+")[0] != "2.14.1":
    sys.exit(1)
# (distribution, extra asked for): torch needs cuda-toolkit[cufile,...], whose extras name
# the nvidia-* libraries.
target, todo, seen = Path(sys.argv[1]), [("torch", ""), ("torchvision", "")], set()
while todo:
    name, extra = todo.pop()
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    key = (dist.metadata["Name"].lower(), extra)
    if key in seen:
        continue
    seen.add(key)
    for r in map(Requirement, dist.requires or []):
        if r.marker is None or r.marker.evaluate({"extra": extra}):
            todo += [(r.name, e) for e in ("", *r.extras)]
    if extra:
        continue  # the files come with the distribution's own entry
    for f in dist.files or []:
        src = Path(dist.locate_file(f))
        if ".." in f.parts or not src.is_file():
            continue  # console scripts live outside site-packages
        (target / f).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, target / f)
        except OSError:
            shutil.copy2(src, target / f)
EOF
}
torch_dir=$CACHE/torch-2.14.1
if [ ! -f "$torch_dir/.done" ]; then
    rm -rf "$torch_dir"
    if link_torch 2>/dev/null; then
        echo "== torch 2.14.1 linked from $PY's environment into $torch_dir"
    else
        echo "== torch 2.14.1 into $torch_dir (local files, once)"
        rm -rf "$torch_dir"
        "$PY" -m pip install -q --target "$torch_dir" torch==2.14.1 torchvision==0.29.1
    fi
    touch "$torch_dir/.done"
fi

venv_for() {  # venv_for RELEASE: the venv's python, created on first use
    local dir=$CACHE/transformers-$1
    if [ ! -f "$dir/.done" ]; then
        echo "== venv for transformers $1" >&2
        rm -rf "$dir"
        "$PY" -m venv "$dir"
        local site
        site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$torch_dir" >"$site/tpa-torch.pth"
        # scipy: transformers builds Mask2Former's loss with the model.
        "$dir/bin/python" -m pip install -q "transformers==$1" pytest hypothesis pyyaml \
            packaging rich scipy >&2
        touch "$dir/.done"
    fi
    echo "$dir/bin/python"
}

if [ $setup = 1 ] || ls src/turbo_physai/_core*.so >/dev/null 2>&1; then
    pkg_path=$PWD/src
else
    installed=$(cd / && "$PY" -c 'import turbo_physai, os; print(os.path.dirname(turbo_physai.__file__))')
    pkg_path=$CACHE/package
    mkdir -p "$pkg_path" && ln -sfn "$installed" "$pkg_path/turbo_physai"
fi

rows=() failed=0
for release in "${releases[@]}"; do
    python=$(venv_for "$release")
    [ $setup = 1 ] && continue
    echo "== transformers $release"
    start=$SECONDS
    validating=()
    [ $record = 1 ] && validating=(TPA_VALIDATE_TRANSFORMERS="$release")
    log=$CACHE/transformers-$release.log
    if env PYTHONPATH="$pkg_path" "${validating[@]}" "$python" -m pytest "${PYTEST[@]}" >"$log"
    then
        result="pass"
    else
        result="FAIL" failed=1
        tail -n 40 "$log"
    fi
    summary=$(tail -n 1 "$log" | tr -d '=' | sed 's/^ *//; s/ *$//')
    echo "$summary"
    result="$result: $summary"
    if [ $record = 1 ] && [ "$result" != "${result#pass}" ]; then
        PYTHONPATH=$pkg_path "$python" -m "$EVIDENCE" record
    fi
    rows+=("$(PYTHONPATH=$pkg_path "$python" -m "$EVIDENCE" row) | $result ($((SECONDS - start)) s) |")
done
[ $setup = 1 ] && exit 0

echo
echo "| transformers | models reached | groups accepted | tests |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $failed
