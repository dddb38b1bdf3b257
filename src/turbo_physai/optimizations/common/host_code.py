"""Compatibility by evidence: a group that replaces a host library's code applies where that
code is the code it was validated against, whatever the release.

A :class:`Validated` table records, per path (the targets, and code they rely on that is not
replaced, such as a grid_sample helper), the ``ast-v1`` fingerprints of the versions validated
(:mod:`turbo_physai.engine.evidence`: comments and formatting do not count) and the releases
each was validated on. :func:`check` passes when every path's current code has a recorded
fingerprint, and otherwise blocks the group naming the installed release, the path whose code
differs, and how to validate it. Nothing is matched by version number: a release that carries
validated code is accepted, and one that changed the code is blocked even within a series.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...engine.context import CompatibilityResult
from ...engine.evidence import identity
from ...engine.paths import ResolutionError, resolve


@dataclass(frozen=True)
class Validated:
    package: str  #: the distribution (its release is named in the messages)
    fingerprints: Mapping[str, Mapping[str, tuple[str, ...]]]  #: path -> ast-v1 -> releases
    how: str  #: what to run to validate another release (the catalog's tests)

    def releases(self) -> list[str]:
        found = {r for by_hash in self.fingerprints.values() for rs in by_hash.values() for r in rs}
        return sorted(found)


def fingerprint(path: str) -> str:
    """The ``ast-v1`` fingerprint of the code at ``path`` now (what a table records)."""
    return identity(resolve(path).raw)["ast-v1"]


def check(context, validated: Validated) -> CompatibilityResult:
    """The compatibility_check body: every recorded path's code is a validated version."""
    installed = context.package_version(validated.package)
    expected = f"code validated on {validated.package} {', '.join(validated.releases())}"
    if installed is None:  # the unresolvable target says more (target.unresolved)
        return CompatibilityResult(True, expected, None, f"{validated.package} is not installed")
    matched: set[str] = set()
    for path, known in validated.fingerprints.items():
        try:
            current = identity(resolve(path).raw).get("ast-v1")
        except ResolutionError as err:
            return CompatibilityResult(
                False,
                expected,
                installed,
                f"{validated.package} {installed}: {path} is missing ({err}); {validated.how}",
            )
        if current not in known:
            return CompatibilityResult(
                False,
                expected,
                installed,
                f"{validated.package} {installed}: the code of {path} is not a validated "
                f"version (fingerprint {current}); {validated.how}",
            )
        matched.update(known[current])
    return CompatibilityResult(
        True,
        expected,
        installed,
        f"{validated.package} {installed}: the code validated on {', '.join(sorted(matched))}",
    )
