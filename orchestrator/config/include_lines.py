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
# one token of the source: a comment (a `//` one runs on over continuations), a string or char
# literal (a `/*` inside one is no comment), a continuation, a newline, or a run of other bytes
_TOKEN_RE = re.compile(
    rb"//(?:\\[ \t]*\n|[^\n])*"
    rb"|/\*.*?(?:\*/|\Z)"
    rb'|"(?:\\[ \t]*\n|\\.|[^"\\\n])*"?'
    rb"|'(?:\\[ \t]*\n|\\.|[^'\\\n])*'?"
    rb"|\\[ \t]*\n"
    rb"|\n"
    rb"|[^/\"'\\\n]+"
    rb"|.",
    re.S,
)
_CONTINUATION_RE = re.compile(rb"\\[ \t]*\n")
_DIRECTIVE_RE = re.compile(rb"[ \t\f\v]*(?:#|%:)[ \t\f\v]*([A-Za-z_]\w*)(.*)", re.S)
_QUOTED_RE = re.compile(rb'[ \t\f\v]*"([^"\n]+)"')


def logical_lines(text: bytes) -> list[tuple[int, bytes]]:
    """(line of its first token, text) of each line once continuations are spliced and each
    comment is one space, as translation phases 1-3 leave them."""
    text = text.replace(b"\r\n", b"\n")
    lines: list[tuple[int, bytes]] = []
    parts: list[bytes] = []
    line, first = 1, 0
    for match in _TOKEN_RE.finditer(text):
        token = match.group()
        if token == b"\n":
            lines.append((first or line, b"".join(parts)))
            parts, first = [], 0
            line += 1
            continue
        if token.startswith((b"//", b"/*")):
            parts.append(b" ")
        elif not token.startswith(b"\\") or not _CONTINUATION_RE.fullmatch(token):
            if not first and token.strip():
                first = line
            parts.append(_CONTINUATION_RE.sub(b"", token))
        line += token.count(b"\n")
    if parts:
        lines.append((first or line, b"".join(parts)))
    return lines


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
    for line, logical in logical_lines(text.removeprefix(b"\xef\xbb\xbf")):  # gcc skips a BOM (round 61)
        directive = _DIRECTIVE_RE.match(logical)
        if directive is None:
            continue
        word, rest = directive.group(1), directive.group(2)
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
    if len(text) > INCLUDE_BYTES:  # the first 1 MiB was read, and an include past it was not shipped
        raise ConfigError(
            str(path),
            "#include",
            f"a file over {INCLUDE_BYTES // (1024 * 1024)} MiB, more than the farm reads for its includes",
            "a kernel's sources and headers under that size (the farm reads them whole to find the "
            "headers it must ship)",
            "Split the file, or build its data on the node rather than shipping it.",
        )
    return read_includes(text)
