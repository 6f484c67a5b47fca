"""YAML reading that remembers where every value came from.

PyYAML's `safe_load` forgets line numbers and silently keeps the last of two duplicate keys. We compose
the node tree ourselves and build plain dicts and lists that also carry the line of each key and item,
so that validation can name `file:line` for every field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import yaml

from lorafleet.collector import paused
from lorafleet.errors import Problem
from lorafleet.paths import is_device


def _fast_loader() -> Any:
    """libyaml's composer (shipped in PyYAML's wheels) builds the same line-marked node tree several times faster
    than the pure-Python one; None where PyYAML was built without it. Implicit tags are resolved per scalar by
    regular expressions, and an inventory repeats the same short values thousands of times: remember them."""
    base = getattr(yaml, "CSafeLoader", None)
    if base is None:
        return None

    class Loader(base):  # type: ignore[misc,valid-type]
        _tags: ClassVar[dict[tuple[str, bool, bool], str]] = {}

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is not yaml.ScalarNode or len(value) > 64:
                return super().resolve(kind, value, implicit)
            key = (value, *implicit)
            tag = self._tags.get(key)
            if tag is None:
                tag = self._tags[key] = super().resolve(kind, value, implicit)
            return tag

    return Loader


C_LOADER: Any = _fast_loader()


class LDict(dict):
    """A mapping that remembers its file, its own line and the file and line of each key."""

    file: str
    line: int
    key_lines: dict[Any, int]
    key_files: dict[Any, str]


class LList(list):
    """A sequence that remembers its file, its own line and the file and line of each item."""

    file: str
    line: int
    item_lines: list[int]
    item_files: list[str]


def new_ldict(file: str, line: int) -> LDict:
    out = LDict()
    out.file, out.line, out.key_lines, out.key_files = file, line, {}, {}
    return out


def new_llist(file: str, line: int) -> LList:
    out = LList()
    out.file, out.line, out.item_lines, out.item_files = file, line, [], []
    return out


def where(container: Any, key: Any = None) -> tuple[str | None, int | None]:
    """(file, line) of `container[key]`, or of the container itself when key is None."""
    file = getattr(container, "file", None)
    line = getattr(container, "line", None)
    if key is None:
        return file, line
    if isinstance(container, LDict) and key in container.key_lines:
        return container.key_files.get(key, file), container.key_lines[key]
    if isinstance(container, LList) and isinstance(key, int) and 0 <= key < len(container.item_lines):
        return container.item_files[key], container.item_lines[key]
    return file, line


_STR = "tag:yaml.org,2002:str"


MAX_ALIASED_VALUES = 1_000_000  # entries an inventory's aliases and merges may copy in all (a big fleet: ~100k)


class _TooBigError(Exception):
    """The aliases expand past any real inventory (a "billion laughs" file): stop before memory runs out."""


class _Builder:
    def __init__(self, file: str, loader: Any, problems: list[Problem]) -> None:
        self.file = file
        self.loader = loader
        self.problems = problems
        self.built: set[int] = set()  # the collections built once: building one again is an alias's copy
        self.open: set[int] = set()  # the collections being built: an alias to one of them is a cycle
        self.copies = 0  # entries of the collections copied so far

    def build(self, node: yaml.Node, path: str) -> Any:
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            key = id(node)
            if key in self.open:
                self.problems.append(Problem(self.file, node.start_mark.line + 1, path, "an alias refers to itself"))
                return None
            if key in self.built:  # an alias's copy (or a merge's): what it copies counts against the bound
                self.copies += len(node.value)
                if self.copies > MAX_ALIASED_VALUES:
                    raise _TooBigError
            else:
                self.built.add(key)
            self.open.add(key)
            try:
                return self._mapping(node, path) if isinstance(node, yaml.MappingNode) else self._sequence(node, path)
            finally:
                self.open.discard(key)
        if node.tag == _STR:
            return node.value  # the resolver already said it is a plain string; skip the constructor
        try:
            return self.loader.construct_object(node, deep=True)
        except ValueError as exc:  # a number past Python's digit limit for int(), say
            reason = str(exc).split(":")[0]
            self.problems.append(Problem(self.file, node.start_mark.line + 1, path, f"unreadable value ({reason})"))
            return None

    def _sequence(self, node: yaml.SequenceNode, path: str) -> LList:
        out = new_llist(self.file, node.start_mark.line + 1)
        for i, item in enumerate(node.value):
            out.append(self.build(item, f"{path}[{i}]"))
            out.item_lines.append(item.start_mark.line + 1)
            out.item_files.append(self.file)
        return out

    def _mapping(self, node: yaml.MappingNode, path: str) -> LDict:
        out = new_ldict(self.file, node.start_mark.line + 1)
        own: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                # `<<: *anchor` merges an anchored mapping; explicit keys win over merged ones.
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for src in sources:
                    merged = self.build(src, path)
                    if isinstance(merged, dict):
                        for k, v in merged.items():
                            if k not in own:
                                out[k] = v
                                out.key_lines[k] = key_node.start_mark.line + 1
                                out.key_files[k] = self.file
                continue
            line = key_node.start_mark.line + 1
            try:
                key = key_node.value if key_node.tag == _STR else self.loader.construct_object(key_node, deep=True)
            except ValueError as exc:
                self.problems.append(Problem(self.file, line, path, f"unreadable key ({str(exc).split(':')[0]})"))
                continue
            if not isinstance(key, (str, int, float, bool)):  # a list, a mapping, a null
                self.problems.append(Problem(self.file, line, path, "mapping keys must be plain names"))
                continue
            if key in own:
                first = out.key_lines[key]
                self.problems.append(
                    Problem(self.file, line, _join(path, key), f"duplicate key (first defined on line {first})")
                )
                continue
            own.add(key)
            out[key] = self.build(value_node, _join(path, key))
            out.key_lines[key] = line
            out.key_files[key] = self.file
        return out


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def load_yaml(path: Path) -> tuple[Any, list[Problem]]:
    """Parse one YAML file into line-aware values; problems are returned, never raised."""
    file = str(path)
    problems: list[Problem] = []
    try:
        if is_device(path):  # /dev/zero: read until memory ends
            return None, [Problem(file, None, "", "is a device, expected a YAML file")]
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [Problem(file, None, "", "no such file")]
    except IsADirectoryError:
        return None, [Problem(file, None, "", "is a folder, expected a YAML file")]
    except UnicodeDecodeError as exc:
        return None, [Problem(file, None, "", f"not UTF-8 text ({exc.reason})")]
    except OSError as exc:
        return None, [Problem(file, None, "", f"cannot read: {exc.strerror}")]
    for number, text_line in enumerate(text.splitlines() if "\t" in text else (), start=1):
        indent = text_line[: len(text_line) - len(text_line.lstrip(" \t"))]
        if "\t" in indent:
            problems.append(Problem(file, number, "", "tab in indentation; YAML indents with spaces only"))
    if problems:
        return None, problems
    loader = None
    with paused():  # a big inventory is hundreds of thousands of new, long-lived objects: nothing to collect
        try:
            loader = (C_LOADER or yaml.SafeLoader)(text)  # PyYAML's own reader checks every character here
            node = loader.get_single_node()
            if node is None:
                return None, [Problem(file, None, "", "the file is empty")]
            return _Builder(file, loader, problems).build(node, ""), problems
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            what = exc.problem or exc.context or "invalid YAML"
            if exc.context and exc.problem:
                what = f"{exc.problem} ({exc.context})"
            return None, [Problem(file, line, "", f"invalid YAML: {what}")]
        except yaml.reader.ReaderError as exc:  # a character YAML does not allow: its line, in one line
            code = ord(exc.character) if isinstance(exc.character, str) else exc.character
            if C_LOADER is None:  # PyYAML's own reader: a position in characters
                line = text.count("\n", 0, exc.position) + 1
            else:  # libyaml's: a position in the UTF-8 bytes
                line = text.encode("utf-8", "replace").count(b"\n", 0, exc.position) + 1
            return None, [Problem(file, line, "", f"invalid YAML: character {code:#06x}: {exc.reason}")]
        except yaml.YAMLError as exc:
            return None, [Problem(file, None, "", f"invalid YAML: {exc}")]
        except _TooBigError:
            return None, [
                Problem(file, None, "", f"its aliases copy more than {MAX_ALIASED_VALUES:,} values: not an inventory")
            ]
        finally:
            if loader is not None:
                loader.dispose()
