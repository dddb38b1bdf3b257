#!/usr/bin/env bash
# tools/demo.sh [DEMO OPTIONS]: the main job (see README.md): a small random-init Deformable
# DETR, optimized by a generated config, compared with stock and rolled back. Installs only what
# the demo needs into .venv (tools/setup.sh demo); options go to `turbo-physai demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
case " $* " in *" --plot"*) export DEMO_PLOT=1 ;; esac
source tools/setup.sh demo
turbo-physai demo "$@"
