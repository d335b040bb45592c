"""Reading a YAML file of the farm's (farm.yaml, a job file) as untrusted input:
duplicate keys refused (YAML keeps the last), its size, depth and expanded size
bounded (an alias bomb), and every problem a ConfigError naming the file.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from orchestrator.config.yaml_hints import malformed_yaml
from orchestrator.errors import ConfigError

# libyaml's C parser where PyYAML was built with it (10x faster), else the pure-Python one
_SafeBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeBase):  # type: ignore[misc, valid-type]
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last."""


_MERGE_TAG = "tag:yaml.org,2002:merge"
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
# YAML 1.1 reads `010` as octal 8 and `1:30` as 90 (base 60): `build_jobs: 010` ran 8 builds unsaid
_UNCLEAR_NUMBER = re.compile(r"[-+]?(?:0[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)")
# What the farm's files are made of: YAML's plain scalars, lists and mappings (a date is pydantic's to
# refuse, by its key). `sources: !!set {a.cu, b.cu}` loaded as a set, the compiled files in Python's
# hash order, another each run, and `!!binary` made a marker of bytes (red-team round 92)
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map", "merge", "timestamp")
)


class WrittenFloat(float):
    """A float as the file wrote it: `cc: 8.10` is 8.1 to YAML, and "8.10" to the reader."""

    written: str

    def __new__(cls, value: float, written: str) -> WrittenFloat:
        made = super().__new__(cls, value)
        made.written = written
        return made

    def __repr__(self) -> str:  # as the file has it, in an error's `found`
        return self.written

    def __reduce__(self) -> tuple[type, tuple[float, str]]:  # copy.deepcopy and pickle make one again
        return (WrittenFloat, (float(self), self.written))


# written back out (`farm jobs`) as the float it is: safe_dump knows no float subclass
yaml.SafeDumper.add_representer(WrittenFloat, yaml.representer.SafeRepresenter.represent_float)


def _construct_float(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> float:
    return WrittenFloat(loader.construct_yaml_float(node), node.value)


def _key(loader: _UniqueKeyLoader, key_node: yaml.Node, deep: bool) -> Any:
    """A mapping's key: a scalar as written (every key the farm reads is a name: YAML 1.1
    read `075:` as 61, `on:` as True and `1_0:` as 10, and the error named a key not in
    the file). The node itself is left as it is: an anchor may make it a value elsewhere."""
    if isinstance(key_node, yaml.ScalarNode):
        return key_node.value
    return loader.construct_object(key_node, deep=deep)  # `[a]: 1`, `? {a: 1}`: refused below


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:  # `<<: *base`: its keys join below, the ones written here win
            continue
        key = _key(loader, key_node, deep)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise _BadKey(line, type(key).__name__)
        if key in seen:
            raise _DuplicateKey(key, seen[key], line)
        seen[key] = line
    loader.flatten_mapping(node)  # a merge's pairs first, then those written here: the later wins
    mapping: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _key(loader, key_node, deep)
        if not isinstance(key, str):
            raise _BadKey(key_node.start_mark.line + 1, type(key).__name__)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _first_duplicate(root: yaml.Node) -> _DuplicateKey | _UnclearNumber | _Unread | None:
    """The first key given twice in one mapping, or number YAML reads as octal or base 60,
    in the file's order, named by its whole path (`nodes.t4.host`, not `host`), before
    anything is constructed."""
    seen_nodes: set[int] = set()

    def walk(node: yaml.Node, path: str) -> _DuplicateKey | _UnclearNumber | _Unread | None:
        if id(node) in seen_nodes:  # an alias: its keys were checked where it was defined
            return None
        seen_nodes.add(id(node))
        if node.tag not in _PLAIN_TAGS:
            return _Unread(path, f"the YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')}", node, "plain YAML")
        if isinstance(node, yaml.ScalarNode):
            if node.tag in _NUMBER_TAGS and _UNCLEAR_NUMBER.fullmatch(node.value):
                return _UnclearNumber(path, node.value, node.start_mark.line + 1)
            # Python reads no int of more digits (sys.get_int_max_str_digits): a ValueError past the
            # loader, "a bug in farm", exit 70 (red-team round 92)
            digits, limit = sum(c.isdigit() for c in node.value), getattr(sys, "get_int_max_str_digits", int)()
            if node.tag == _NUMBER_TAGS[0] and limit and digits > limit:
                return _Unread(path, f"a number of {digits} digits", node, f"a number of at most {limit} digits")
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                if found := walk(item, f"{path}[{index}]"):
                    return found
        elif isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key_node, value in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue  # not a key the farm reads: _BadKey says so
                name = f"{path}.{key_node.value}" if path else str(key_node.value)
                line = key_node.start_mark.line + 1
                if key_node.value in lines:
                    return _DuplicateKey(name, lines[key_node.value], line)
                lines[key_node.value] = line
                if found := walk(value, name):
                    return found
        return None

    return walk(root, "")


class _BadKey(Exception):
    def __init__(self, line: int, kind: str) -> None:
        self.line, self.kind = line, kind


class _UnclearNumber(Exception):
    def __init__(self, key: str, text: str, line: int) -> None:
        self.key, self.text, self.line = key, text, line


class _Unread(Exception):
    """A value the farm will not read, at its key: found (and its line), expected."""

    def __init__(self, key: str, found: str, node: yaml.Node, expected: str) -> None:
        self.key, self.found, self.line, self.expected = key, found, node.start_mark.line + 1, expected


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, second: int) -> None:
        self.key, self.first, self.second = key, first, second


# A configuration is small: these bounds refuse what would otherwise crash or
# exhaust the farm while loading (500 nested "[" is a RecursionError in the
# parser; a 589-byte alias bomb expands to billions of nodes).
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000

_OPEN = (
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
)
_CLOSE = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def _expanded_size(root: yaml.Node) -> int:
    """Nodes of the document with every alias expanded, counted without expanding
    (each node's size once, memoised; aliases share their node)."""
    sizes: dict[int, int] = {}
    order: list[yaml.Node] = []
    stack, seen = [root], set()
    while stack:  # children before parents, iteratively: no recursion on deep input
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(item for pair in node.value for item in pair)
    for node in reversed(order):
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [item for pair in node.value for item in pair]
        else:
            children = []
        sizes[id(node)] = min(1 + sum(sizes.get(id(c), 1) for c in children), MAX_YAML_NODES + 1)
    return sizes[id(root)]


def read_yaml(path: Path, what: str) -> Any:
    """Parse one YAML file, turning every failure into a ConfigError on that file."""
    if not path.is_file():
        # a folder, a FIFO or a device was "no such file" (a red-team finding)
        found = "a folder" if path.is_dir() else "no regular file" if path.exists() else "no such file"
        if path.is_symlink() and not path.exists():  # a loop, a removed target: "no such file" of a listed file
            found = f"a symbolic link to {os.readlink(path)!r}, which leads to no file (a loop or a removed target)"
        raise ConfigError(str(path), "", found, f"{what} (a YAML file)")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise ConfigError(str(path), "", f"a file of {size} bytes", f"{what} of at most {MAX_YAML_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(str(path), "", f"an unreadable file ({err})", "UTF-8 YAML") from err
    try:
        depth = 0
        for token in yaml.scan(text, Loader=_SafeBase):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    line = token.start_mark.line + 1
                    raise ConfigError(
                        str(path), "", f"nesting deeper than {MAX_YAML_DEPTH} levels (line {line})", f"{what}"
                    )
            elif isinstance(token, _CLOSE):
                depth -= 1
        loader = _UniqueKeyLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            if duplicate := _first_duplicate(node):
                raise duplicate
            # without an alias nothing can multiply (and the file is at most 1 MiB)
            if "*" in text and _expanded_size(node) > MAX_YAML_NODES:
                raise ConfigError(
                    str(path),
                    "",
                    f"a document of more than {MAX_YAML_NODES} values once its aliases are expanded",
                    f"{what} (aliases that do not multiply)",
                )
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except _BadKey as bad:
        raise ConfigError(
            str(path), "", f"a {bad.kind} as a mapping key (line {bad.line})", "keys that are names"
        ) from None
    except _UnclearNumber as bad:
        raise ConfigError(
            str(path),
            bad.key,
            f"{bad.text} (line {bad.line}), which YAML reads as an octal or base-60 number",
            "a number written in decimal, without a leading 0 or ':' (quote it if it is text)",
        ) from None
    except _Unread as bad:
        raise ConfigError(str(path), bad.key, f"{bad.found} (line {bad.line})", bad.expected) from None
    except _DuplicateKey as dup:
        raise ConfigError(
            str(path),
            dup.key,
            f"the key {dup.key.rpartition('.')[2]!r} twice (lines {dup.first} and {dup.second})",
            "each key once",
        ) from None
    except yaml.YAMLError as err:
        found, expected = malformed_yaml(err, text)
        raise ConfigError(str(path), "", found, expected) from None
    except RecursionError:
        raise ConfigError(str(path), "", "nesting too deep to read", what) from None


# ------------------------------------------------------- validation messages
