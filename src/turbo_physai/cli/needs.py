"""What a command needs that may be missing here: one line that names it and how to get it
(exit status 2), instead of an import traceback."""

from __future__ import annotations

import importlib

#: Everything ``turbo-physai demo`` needs (torch, transformers, matplotlib for --plot).
DEMO_EXTRA = "pip install 'turbo_physai[demo]'"


class Unavailable(RuntimeError):
    """Something the command needs is not installed, or not present on this machine."""


def need(*modules: str, install: str, purpose: str) -> None:
    """Import ``modules``; raise :class:`Unavailable` naming each one that is not installed, or
    the first that is installed but fails to import."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as err:
            if isinstance(err, ModuleNotFoundError) and err.name == name:
                missing.append(name)
            else:
                raise Unavailable(f"{name} is installed but cannot be imported ({err})") from None
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise Unavailable(f"{' and '.join(missing)} {verb} not installed ({purpose}): {install}")
