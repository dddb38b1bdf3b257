# tools/setup.sh: sourced by the other tools. Creates .venv and installs turbo_physai with its
# test dependencies; installs the system packages the C++ tests need when they are missing.
if [ ! -f /usr/include/gtest/gtest.h ] || ! command -v ninja >/dev/null; then
    apt-get update -qq && apt-get install -y -qq libgtest-dev ninja-build >/dev/null
fi
[ -d .venv ] || python3 -m venv .venv
source .venv/bin/activate
# Pinned to the torch/torchvision pair this machine kind keeps on disk (no download): timm needs
# torchvision, and PyPI's torchvision does not import beside the CPU-only torch 2.13 wheel.
python -m pip install -q torch==2.14.1 torchvision==0.29.1 ruff
python -m pip install -q ".[test]"
