#!/usr/bin/env bash
# tools/demo.sh: set up a virtual environment and run the main job (see README.md):
# a small random-init Deformable DETR, optimized by a generated config, compared and rolled back.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh
turbo-physai demo "$@"
