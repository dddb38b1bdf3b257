"""YAML reading that remembers where every key and item came from, within documented limits.

PyYAML's constructors drop positions once they have built Python objects. The constructors
here build mappings and sequences that keep the 1-based line of each key / item, so every
schema error can name ``file:line`` and the key. They also refuse what a config never needs
and what makes a loader unsafe or ambiguous: anchors/aliases (exponential "billion laughs"
expansion, recursive structures) and duplicate keys (PyYAML would silently keep the last one).

Whatever the bytes, only :class:`ConfigError` leaves :func:`read` / :func:`parse`: a value
PyYAML's own constructors choke on (``!!bool maybe``, ``!!timestamp garbage``, a 5000-digit
integer, ``2020-13-45``) becomes an error naming its line. Inputs beyond :data:`LIMITS` are
refused before they cost memory or time: a file's size is checked before it is read, the
node count and depth while it is built.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from .model import ConfigError

#: Limits on one config file. Real configs are a few KB (TurboPhysAI's largest: 13 KB,
#: 80 groups would be ~60 KB); these stop a hostile or broken file in well under a second.
LIMITS = {
    "bytes": 512 * 1024,  # checked with stat() before reading
    "nodes": 50_000,  # YAML scalars + mappings + sequences
    "depth": 64,  # nesting of mappings/sequences
}

# libyaml (shipped in PyYAML's wheels) parses ~10x faster than the pure-Python parser; the
# constructors below run on either.
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class MarkedDict(dict):
    """A mapping with ``line`` (where it starts) and ``lines[key]`` (where each key is)."""

    line: int = 0
    lines: dict[Any, int]


class MarkedList(list):
    """A sequence with ``line`` and ``lines[i]`` (where each item is)."""

    line: int = 0
    lines: list[int]


class _Located(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


class _Loader(_BASE):
    def __init__(self, stream: Any):
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def construct_object(self, node, deep=False):  # noqa: ANN001 (PyYAML's signature)
        line = node.start_mark.line + 1
        # Each node is constructed once; asking again means an alias (*name) points at it. The
        # composer shares the node, so this holds for the C and the Python parser alike.
        if node in self.constructed_objects or node in self.recursive_objects:
            raise _Located(line, "YAML anchors and aliases (&name, *name) are not allowed")
        self._nodes += 1
        if self._nodes > LIMITS["nodes"]:
            raise _Located(line, f"more than {LIMITS['nodes']} YAML nodes (the limit)")
        self._depth += 1
        try:
            if self._depth > LIMITS["depth"]:
                raise _Located(line, f"nested deeper than {LIMITS['depth']} levels (the limit)")
            return super().construct_object(node, deep=deep)
        except (_Located, yaml.YAMLError):
            raise
        except RecursionError:
            raise _Located(line, "YAML nested too deeply") from None
        except Exception as err:  # a value PyYAML's constructors cannot read
            value = node.value if isinstance(node, yaml.ScalarNode) else "..."
            raise _Located(
                line, f"cannot read {node.tag.rsplit(':', 1)[-1]} value {value!r:.60}: {err}"
            ) from None
        finally:
            self._depth -= 1


def _mapping(loader: _Loader, node: yaml.MappingNode) -> MarkedDict:
    out = MarkedDict()
    out.line, out.lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in out
        except TypeError:
            raise _Located(line, f"mapping key {key!r:.60} is not a plain value") from None
        if duplicate:
            raise _Located(line, f"duplicate key {key!r:.60} (first on line {out.lines[key]})")
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


def parse(text: str | bytes, where: str) -> Any:
    """Parse one YAML document; any problem is a ConfigError naming ``where:line``."""
    if len(text) > LIMITS["bytes"]:
        raise ConfigError(f"{where}: larger than {LIMITS['bytes']} bytes (the limit)")
    try:
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
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
    except (ValueError, TypeError, MemoryError) as err:  # the C reader's own complaints
        raise ConfigError(f"{where}: invalid YAML: {type(err).__name__}: {err}") from None


def read(path: str | Path) -> Any:
    """Read and parse a config file: a regular file (FIFOs, devices and directories would
    block or mislead), at most ``LIMITS["bytes"]`` long, UTF-8."""
    try:
        info = os.stat(path)  # follows symlinks; a loop raises OSError (ELOOP)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if info.st_size > LIMITS["bytes"]:
            raise ConfigError(
                f"{path}: {info.st_size} bytes, larger than {LIMITS['bytes']} (the limit)"
            )
        with open(path, "rb") as stream:
            data = stream.read(LIMITS["bytes"] + 1)  # the size may have lied (/proc, growth)
    except (OSError, RuntimeError) as err:  # RuntimeError: pathlib's symlink-loop report
        raise ConfigError(f"{path}: cannot read: {err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text: {err}") from None
    return parse(text, str(path))


def line_of(container: Any, key: Any) -> int:
    """The line of ``container[key]`` if known, else the container's own line (0: unknown)."""
    lines = getattr(container, "lines", None)
    if isinstance(lines, dict) and key in lines:
        return lines[key]
    if isinstance(lines, list) and isinstance(key, int) and 0 <= key < len(lines):
        return lines[key]
    return getattr(container, "line", 0)
