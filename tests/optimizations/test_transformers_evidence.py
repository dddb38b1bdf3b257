"""The evidence the transformers MSDA groups accept a release by: a fingerprint that ignores
docstrings, comments, formatting and annotations but no statement, and the math markers."""

import importlib.util
import textwrap

import pytest

from turbo_physai.engine.declarations import wrap
from turbo_physai.engine.mechanisms import object_patch
from turbo_physai.engine.mechanisms.base import PrepareContext
from turbo_physai.engine.report import FAIL, NOT_APPLICABLE, GroupReport
from turbo_physai.optimizations.common import host_code
from turbo_physai.optimizations.common.transformers import evidence

STOCK = """
def msda(value, shapes, loc, weights):
    value_list = value.split([height * width for height, width in shapes], dim=1)
    out = []
    for level, (height, width) in enumerate(shapes):
        out.append(nn.functional.grid_sample(
            value_list[level], loc, mode="bilinear", padding_mode="zeros", align_corners=False))
    return out
"""

RESTYLED = '''
def msda(value: Tensor, shapes: list[tuple], loc: Tensor, weights: Tensor) -> list:
    """A docstring that a release added."""
    value_list = value.split(
        [height * width for height, width in shapes], dim=1  # a comment
    )
    out = []
    for level, (height, width) in enumerate(shapes):
        out.append(
            nn.functional.grid_sample(value_list[level], loc, mode='bilinear',
                                      padding_mode='zeros', align_corners=False)
        )
    return out
'''


def _function(tmp_path, source, name="msda"):
    path = tmp_path / f"m{abs(hash(source))}.py"
    path.write_text("from __future__ import annotations\n" + textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_docstrings_comments_formatting_and_annotations_do_not_count(tmp_path):
    stock, restyled = _function(tmp_path, STOCK), _function(tmp_path, RESTYLED)
    assert host_code.fingerprint(stock) == host_code.fingerprint(restyled)
    assert host_code.fingerprint(stock).startswith("msda-ast-v1:")
    assert evidence.math_problems(stock) == evidence.math_problems(restyled) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("align_corners=False", "grid_sample align_corners=False"),
        ('mode="bilinear"', "grid_sample mode='bilinear'"),
        ('padding_mode="zeros"', "grid_sample padding_mode='zeros'"),
        ("height * width for", "values split per level by height * width"),
    ],
)
def test_a_change_to_the_math_changes_the_fingerprint_and_is_named(tmp_path, change, problem):
    changed = STOCK.replace(
        change,
        {
            "align_corners=False": "align_corners=True",
            'mode="bilinear"': 'mode="nearest"',
            'padding_mode="zeros"': 'padding_mode="border"',
            "height * width for": "height + width for",
        }[change],
    )
    stock, other = _function(tmp_path, STOCK), _function(tmp_path, changed)
    assert host_code.fingerprint(other) != host_code.fingerprint(stock)
    assert evidence.math_problems(other) == [problem]


def test_the_signature_counts(tmp_path):
    renamed = STOCK.replace("weights)", "weights, im2col_step=64)")
    assert host_code.fingerprint(_function(tmp_path, renamed)) != host_code.fingerprint(
        _function(tmp_path, STOCK)
    )


def test_code_without_source_has_no_fingerprint():
    assert host_code.fingerprint(len) is None
    assert evidence.math_problems(len) == ["no source to read"]


def test_an_optional_target_a_release_lacks_patches_nothing_a_required_one_blocks():
    target = "turbo_physai.optimizations.common.transformers.evidence.not_in_this_release"
    for optional, status in ((True, NOT_APPLICABLE), (False, FAIL)):
        decl = wrap(
            target, "turbo_physai.optimizations.common.compile.compile_wrapper", optional=optional
        )
        prepared = object_patch.prepare(decl, PrepareContext("g", {}, None, GroupReport("g")))
        (check,) = prepared.checks
        assert (check.status, prepared.ok, prepared.locations) == (status, optional, [])
