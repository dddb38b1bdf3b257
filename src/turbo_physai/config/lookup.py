"""Find OptimizationConfig files by ``metadata.id``: the places ``extends: [ID]`` searches.

In this order, the first places that have the ID win; two different files there with the same
ID are an error naming both:

1. the ``*.yaml``/``*.yml`` files next to the referring file;
2. those in each directory of ``TURBO_PHYSAI_CONFIG_PATH`` (``os.pathsep``-separated);
3. TurboPhysAI's package layout: when the referring file sits in a ``configs`` folder below a
   folder named ``optimizations``, every ``configs/optimization.yaml`` under that folder.
   Inside that layout only ``configs/optimization.yaml`` files declare IDs, in places 1 and 2
   too (TurboPhysAI looks IDs up in ``optimizations/**/configs/optimization.yaml`` only);

then, only when none of those has it, 4. the configs shipped with the built-in catalogs.

Recipes (``recipe.yaml``/``recipe.yml``, TurboPhysAI's input to ``generate``, which carry the
same ID as the ``optimization.yaml`` generated from them) are never found by ID. A file that
cannot be read or parsed, is not a regular file, or is a symlink loop never gets in the way of
another: it simply has no ID (and is named in the error when nothing else has the ID).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from . import marks
from .model import ConfigError

CONFIG_PATH_ENV = "TURBO_PHYSAI_CONFIG_PATH"
#: Configs shipped with the built-in catalogs (package data).
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "catalogs" / "configs"
RECIPES = frozenset({"recipe.yaml", "recipe.yml"})
LAYOUT_ROOT, LAYOUT_DIR, LAYOUT_FILE = "optimizations", "configs", "optimization.yaml"
#: A layout scan visits at most this many folders (symlinks are not followed).
SCAN_LIMIT = 5000


class Index:
    """IDs of candidate files, each file read at most once (one Index per load)."""

    def __init__(self) -> None:
        self._ids: dict[Path, object] = {}
        self._problems: dict[Path, str] = {}
        self.truncated: list[Path] = []

    def find(self, config_id: str, referrer: Path) -> list[Path]:
        """Files declaring ``config_id`` in places 1-3 (see the module docstring)."""
        found: list[Path] = []
        for path in self._candidates(referrer):
            if path not in found and self.id_of(path, config_id) == config_id:
                found.append(path)
        return found

    def id_of(self, path: Path, hint: str | None = None) -> object:
        """``metadata.id`` of the file, or None when it has none or cannot be read. With a
        ``hint``, a file whose bytes do not contain it is not parsed (it cannot declare it)."""
        if path in self._ids:
            return self._ids[path]
        try:
            if hint is not None and not _mentions(path, hint):
                return None  # not cached: another ID may be looked up in this file later
            raw = marks.read(path)
        except ConfigError as err:
            self._problems[path] = str(err)
            raw = None
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        self._ids[path] = meta.get("id") if isinstance(meta, dict) else None
        return self._ids[path]

    def problems(self, config_id: str) -> list[str]:
        """Unreadable candidates that mention ``config_id`` (for the not-found error)."""
        return [msg for path, msg in self._problems.items() if _mentions(path, config_id)]

    def recipes(self, config_id: str, referrer: Path) -> list[Path]:
        """Recipes in the searched places that declare ``config_id`` (for that error too)."""
        return [
            path
            for directory in self._dirs(referrer)
            for path in (directory / name for name in sorted(RECIPES))
            if path.is_file() and self.id_of(path, config_id) == config_id
        ]

    def _candidates(self, referrer: Path) -> Iterator[Path]:
        layout = layout_root(referrer)
        for directory in self._dirs(referrer):
            if layout is not None and layout in directory.parents:
                if (directory / LAYOUT_FILE).is_file():
                    yield _real(directory / LAYOUT_FILE)
            else:
                yield from yaml_files(directory)

    def _dirs(self, referrer: Path) -> Iterator[Path]:
        """Places 1-3: the referrer's folder, the search path, the layout's configs folders."""
        yield referrer.parent
        yield from search_path()
        root = layout_root(referrer)
        if root is None:
            return
        visited = 0
        for current, subdirs, _ in os.walk(root, followlinks=False):
            visited += 1
            if visited > SCAN_LIMIT:
                self.truncated.append(root)
                return
            subdirs[:] = sorted(d for d in subdirs if not d.startswith((".", "__")))
            if Path(current).name == LAYOUT_DIR:
                yield Path(current)


def search_path() -> list[Path]:
    """The directories of ``TURBO_PHYSAI_CONFIG_PATH``."""
    return [Path(d) for d in os.environ.get(CONFIG_PATH_ENV, "").split(os.pathsep) if d]


def layout_root(referrer: Path) -> Path | None:
    """The ``optimizations`` folder of TurboPhysAI's layout that ``referrer`` sits in."""
    if referrer.parent.name != LAYOUT_DIR:
        return None
    for ancestor in referrer.parent.parents:
        if ancestor.name == LAYOUT_ROOT:
            return ancestor
    return None


def shipped() -> dict[str, Path]:
    """The configs shipped with the built-in catalogs, by ``metadata.id``."""
    index = Index()
    found: dict[str, Path] = {}
    for path in yaml_files(SHIPPED_DIR):
        config_id = index.id_of(path)
        if isinstance(config_id, str):
            found.setdefault(config_id, path)
    return found


def yaml_files(directory: Path) -> Iterator[Path]:
    """The configs of a folder (recipes left out), symlinks resolved."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        if name.endswith((".yaml", ".yml")) and name not in RECIPES:
            yield _real(directory / name)


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: keep the name, reading it will fail
        return path.absolute()


def _mentions(path: Path, text: str) -> bool:
    try:
        if path.stat().st_size > marks.LIMITS["bytes"] or not path.is_file():
            return False
        with open(path, "rb") as stream:
            return text.encode("utf-8") in stream.read(marks.LIMITS["bytes"] + 1)
    except (OSError, RuntimeError):
        return False
