"""Groups turbo_physai declares by ID but cannot offer, blocked with the reason.

TurboPhysAI's catalogs carry groups whose replacement needs its hardware (Hygon DCU/HCU: HIP
kernels, MIOpen, hipDNN, ``hy-smi``) or is a rewrite of a model's code that turbo_physai does
not have. Declaring them keeps TurboPhysAI's configs meaningful here: ``check`` reports each
such group blocked, names what is missing, and goes on with the others, instead of an unknown
ID. The declarations name the real targets (so reports and conflict detection show what the
group would write); :func:`check`, the groups' compatibility_check, blocks them before anything
is resolved, and force cannot override it.

Reason codes: ``platform.unsupported`` (needs hardware or libraries turbo_physai does not
target) and ``replacement.unavailable`` (turbo_physai has no replacement for this group).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..compatibility import replace_import
from ..engine.context import CompatibilityContext, CompatibilityResult
from ..engine.declarations import Group, Replace, ReplaceImport, group, replace

PLATFORM = "platform.unsupported"
UNAVAILABLE = "replacement.unavailable"
CHECK = f"{__name__}.check"
#: Never imported or installed: the group is blocked before its replacements are resolved.
_NOWHERE = f"{__name__}.not_provided"

#: group ID -> (reason code, what is missing), filled by :func:`blocked`.
REASONS: dict[str, tuple[str, str]] = {}


def target(path: str, aliases: Iterable[str] | str = ()) -> Replace:
    """A target the blocked group would replace (with the aliases TurboPhysAI declares)."""
    return replace(path, _NOWHERE, aliases)


def module(path: str) -> ReplaceImport:
    """A module the blocked import-compatibility group would replace."""
    return replace_import(path, _NOWHERE)


def blocked(group_id: str, *targets: Replace | ReplaceImport, code: str, missing: str,
            depends_on: Iterable[str] = ()) -> Group:
    """Declare ``group_id`` over ``targets``, always blocked with ``code``: ``missing``."""
    REASONS[group_id] = (code, missing)
    return group(group_id, *targets, depends_on=tuple(depends_on), compatibility_check=CHECK)


def check(context: CompatibilityContext) -> CompatibilityResult:
    code, missing = REASONS.get(context.group_id, (UNAVAILABLE, "no reason recorded"))
    return CompatibilityResult(False, reason=missing, code=code)
