"""YAML reading that remembers where every key and item came from.

PyYAML's SafeLoader drops positions once it has built Python objects. This subclass builds
mappings and sequences that keep the 1-based line of each key / item, so every schema error can
name ``file:line`` and the key. It also refuses what a config never needs and what makes a
loader unsafe or ambiguous: anchors/aliases (exponential "billion laughs" expansion, recursive
structures) and duplicate keys (PyYAML would silently keep the last one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .model import ConfigError


class MarkedDict(dict):
    """A mapping with ``line`` (where it starts) and ``lines[key]`` (where each key is)."""

    line: int = 0
    lines: dict[Any, int]


class MarkedList(list):
    """A sequence with ``line`` and ``lines[i]`` (where each item is)."""

    line: int = 0
    lines: list[int]


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):  # noqa: ANN001 (PyYAML's signature)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Located(event.start_mark.line + 1, "YAML aliases (*name) are not allowed")
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise _Located(event.start_mark.line + 1, "YAML anchors (&name) are not allowed")
        return super().compose_node(parent, index)


class _Located(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


def _mapping(loader: _Loader, node: yaml.MappingNode) -> MarkedDict:
    out = MarkedDict()
    out.line, out.lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in out
        except TypeError:
            raise _Located(line, f"mapping key {key!r} is not a plain value") from None
        if duplicate:
            raise _Located(line, f"duplicate key {key!r} (first on line {out.lines[key]})")
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> MarkedList:
    out = MarkedList(loader.construct_object(item, deep=True) for item in node.value)
    out.line = node.start_mark.line + 1
    out.lines = [item.start_mark.line + 1 for item in node.value]
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _sequence)


def parse(text: str, where: str) -> Any:
    """Parse one YAML document; any problem is a ConfigError naming ``where:line``."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except _Located as err:
        raise ConfigError(f"{where}:{err.line}: {err}") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{where}{line}: invalid YAML: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: invalid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{where}: YAML nested too deeply") from None


def read(path: str | Path) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    return parse(text, str(path))


def line_of(container: Any, key: Any) -> int:
    """The line of ``container[key]`` if known, else the container's own line (0: unknown)."""
    lines = getattr(container, "lines", None)
    if isinstance(lines, dict) and key in lines:
        return lines[key]
    if isinstance(lines, list) and isinstance(key, int) and 0 <= key < len(lines):
        return lines[key]
    return getattr(container, "line", 0)
