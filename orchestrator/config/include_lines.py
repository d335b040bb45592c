"""The quoted `#include` directives of a file, read as the preprocessor reads its lines.

What the include scan (includes.py) finds is what the farm ships with a kernel, so it reads
a directive where gcc and nvcc do: after a comment on its line (`/* c */ #include "x.h"`),
across line continuations (`#\\` newline `include "x.h"`), spelled with the `%:` digraph, and
never inside a `#if 0` group or a comment. A line-by-line regex missed the first three (the
header was not shipped, the cell the kernel's build-fail for the farm's omission) and took the
last two for includes (a job file refused for a header nvcc never reads). Other conditions
(`#ifdef`, `#if FOO`) depend on the build's `-D`s and arch: each branch's includes count.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.errors import ConfigError

INCLUDE_BYTES = 64 * 1024 * 1024  # the file is shipped and hashed whole too; past this it is refused, named
# a run of code (whole string and char literals in it: a `/*` inside one is no comment; a lone
# quote, a C++14 digit separator `1'000`, is code), else a comment (a `//` one runs on over
# continuations) or a continuation: those two are spliced out, each of their newlines a NUL,
# so lines keep their numbers. In the regex engine, not a Python loop per token: a 64 MiB file
# of quotes or short lines loads in seconds.
_SPLICE_RE = re.compile(
    rb"((?:\"(?:\\[^\n]|[^\"\\\n])*\"|'(?:\\[^\n]|[^'\\\n])*'|[^/\"'\\]+|/(?![/*])|\\(?![ \t]*\n)|[\"'])+)"
    rb"|//(?:\\[ \t]*\n|[^\n])*|/\*.*?(?:\*/|\Z)|\\[ \t]*\n",
    re.S,
)
_SPACE = rb"[ \t\f\v\0]*"  # NUL: where a comment or continuation was
_DIRECTIVE_RE = re.compile(rb"^" + _SPACE + rb"(#|%:)" + _SPACE + rb"([A-Za-z_][\w\0]*)([^\n]*)", re.M)
_QUOTED_RE = re.compile(rb'[ \t\f\v]*"([^"\n]+)"')


def _splice(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return match.group(1)
    text = match.group()
    return (b" " if text.startswith(b"/") else b"") + b"\0" * text.count(b"\n")


def directives(text: bytes) -> list[tuple[int, bytes, bytes]]:
    """(line, word, rest) of each directive, read once continuations are spliced and each comment
    is one space (translation phases 1-3), its line that of its `#`."""
    text = text.replace(b"\0", b" ").replace(b"\r\n", b"\n")
    text = _SPLICE_RE.sub(_splice, text)
    found = []
    line, counted = 1, 0
    for match in _DIRECTIVE_RE.finditer(text):
        at = match.start(1)
        line += text.count(b"\n", counted, at) + text.count(b"\0", counted, at)
        counted = at
        found.append((line, match.group(2).replace(b"\0", b""), match.group(3).replace(b"\0", b"")))
    return found


def _constant(expression: bytes) -> bool | None:
    """A `#if`'s value where it is a plain number (`0`, `(1)`); None where the build decides."""
    words = expression.strip()
    while words.startswith(b"(") and words.endswith(b")"):
        words = words[1:-1].strip()
    words = words.rstrip(b"uUlL")
    return int(words) != 0 if words.isdigit() else None


def read_includes(text: bytes) -> list[tuple[int, str]]:
    """(line, name) of each live `#include "name"` of a source's text."""
    found: list[tuple[int, str]] = []
    groups: list[list[bool]] = []  # per open #if: [this branch may be live, a branch before was surely taken]
    for line, word, rest in directives(text.removeprefix(b"\xef\xbb\xbf")):  # gcc skips a BOM (round 61)
        if word in (b"if", b"ifdef", b"ifndef"):
            value = _constant(rest) if word == b"if" else None
            groups.append([value is not False, value is True])
        elif word == b"elif" and groups:
            value = None if groups[-1][1] else _constant(rest)
            groups[-1] = [not groups[-1][1] and value is not False, groups[-1][1] or value is True]
        elif word in (b"else", b"elifdef", b"elifndef") and groups:
            groups[-1] = [not groups[-1][1], groups[-1][1] or word == b"else"]
        elif word == b"endif" and groups:
            groups.pop()
        elif word == b"include" and all(live for live, _ in groups):
            quoted = _QUOTED_RE.match(rest)
            if quoted:
                found.append((line, quoted.group(1).decode("utf-8", "replace")))
    return found


def quoted_includes(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each live `#include "name"` in the file; [] where it cannot be read (the
    job's check of its inputs says which, input_paths.py); a ConfigError past INCLUDE_BYTES."""
    try:
        with path.open("rb") as handle:
            text = handle.read(INCLUDE_BYTES + 1)
    except OSError:
        return []
    if len(text) > INCLUDE_BYTES:  # once the first 1 MiB was read, and an include past it not shipped
        raise ConfigError(
            str(path),
            "#include",
            f"a file over {INCLUDE_BYTES // (1024 * 1024)} MiB, more than the farm reads for its includes",
            "a kernel's sources and headers under that size (the farm reads them whole to find the "
            "headers it must ship)",
            "Split the file, or build its data on the node rather than shipping it.",
        )
    return read_includes(text)
