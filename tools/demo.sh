#!/usr/bin/env bash
# tools/demo.sh: set up a virtual environment and run the main job (see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh
python examples/patch_fixture_library.py
