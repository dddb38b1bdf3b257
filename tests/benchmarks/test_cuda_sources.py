"""The standalone CUDA experiments (benchmarks/experiments/*.cu) run only on the GPU machine;
compiling each here with the flags of the build command its header documents keeps them from
breaking silently when the kernels' headers change."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "benchmarks" / "experiments").glob("*.cu"))
NVCC = shutil.which("nvcc")


def documented_flags(source: Path) -> list[str]:
    """The options of the first `nvcc` command in the file's header comment (continuation lines
    joined), without its inputs and output."""
    text = source.read_text(encoding="utf-8")
    found = re.search(r"^//\s+(nvcc (?:[^\n]*\\\n//\s*)*[^\n]*)$", text, re.M)
    assert found, f"{source.name}: no nvcc build command in its header"
    words = shlex.split(re.sub(r"\\\n//\s*", " ", found.group(1)).split("&&")[0])[1:]
    flags, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word == "-o":
            skip = True
        elif word == "-I":
            flags += [word, words[i + 1]]
            skip = True
        elif word.startswith("-"):
            flags.append(word)
    return flags


def test_the_cuda_benchmarks_are_found():
    names = {p.name for p in SOURCES}
    assert {"msda_classic.cu", "msda_forward16_gather.cu", "msda_reduction_floor.cu"} <= names


def test_the_documented_flags_are_read():
    assert documented_flags(ROOT / "benchmarks" / "experiments" / "msda_classic.cu") == [
        "-std=c++17", "-arch=sm_90a", "-O3", "-I", "csrc/kernels"]


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_its_documented_flags(source, tmp_path):
    done = subprocess.run(
        [NVCC, *documented_flags(source), "-c", str(source), "-o", str(tmp_path / "out.o")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, f"{source.name}:\n{done.stderr}"
