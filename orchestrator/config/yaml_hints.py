"""What a malformed YAML file's author is told: where, the line as written, and the likely fix.

PyYAML's own words ("did not find expected key", "mapping values are not allowed here",
"found character that cannot start any token") name a parser state, not the author's
mistake: a kernel author who indented a key one space off, wrote a tab, or left a pass
marker holding ': ' unquoted was told only "expected valid YAML" (review 107).
"""

from __future__ import annotations

import re

import yaml

_INDENT_HINT = (
    "this line, or the one above it, indented as deep as no key beside it: indent each key with spaces "
    "exactly as deep as its siblings (a variant's keys under its name, its name under `variants:`)"
)
# PyYAML's problem text -> the mistake it nearly always means in a hand-written farm or job file
_HINTS: tuple[tuple[str, str], ...] = (
    (
        "mapping values are not allowed",
        "a value holding ': ' (a colon and a space, as a pass marker may) read as a new key: quote the "
        "whole value, e.g. pass_marker: 'vadd \\d+: PASS'",
    ),
    (
        "did not find expected key",
        _INDENT_HINT,
    ),
    (
        "expected <block end>",
        _INDENT_HINT,
    ),
)
_TAB_HINT = "a tab where YAML reads indentation: indent with spaces only"
# `key: "a \(b\)"`: a regex's backslash inside double quotes is a YAML escape (`\(` is none)
_QUOTED_KEY = re.compile(r'^(\s*[A-Za-z0-9_.-]+:\s*)"(.*)"\s*(#.*)?$')


def _escape_hint(line: str) -> str:
    """Say that a regex belongs in single quotes, with the line so written where it is one key's value."""
    hint = (
        "a backslash inside double quotes, which YAML reads as its own escape (\\n, \\t), not the "
        "regular expression's: write a marker or build command in single quotes"
    )
    quoted = _QUOTED_KEY.match(line)
    if quoted is None:
        return hint
    return hint + ", e.g. " + quoted.group(1).strip() + " '" + quoted.group(2).replace("'", "''") + "'"


def _missing_colon(lines: list[str], at: int, column: int) -> str | None:
    """The line above, where a bare word (`sm80` for `sm80:`) made this line's key a value's rest."""
    if ":" in lines[at][:column]:
        return None  # the colon YAML stopped at is not the line's first: a value holding ': '
    above = next((i for i in range(at - 1, -1, -1) if lines[i].strip() and not lines[i].lstrip().startswith("#")), None)
    if above is None or ":" in lines[above] or lines[above].lstrip().startswith("-"):
        return None
    word = lines[above].strip()
    return f"a key missing its colon on line {above + 1}, `{word}`: write `{word}:`"


def malformed_yaml(err: yaml.YAMLError, text: str) -> tuple[str, str]:
    """(found, expected) for a ConfigError on a file YAML could not parse."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    if mark is None:
        return f"malformed YAML somewhere ({problem})", "valid YAML"
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    found = f"malformed YAML at line {mark.line + 1}, column {mark.column + 1} ({problem})"
    shown = line.strip()
    if shown:
        # as written (a marker's backslashes not doubled), unless it holds what a terminal would act on
        found += f": `{shown}`" if shown.isprintable() else f": {shown!r}"
    hint = _TAB_HINT if "\t" in line[: mark.column + 1] else None
    if hint is None and problem.startswith("found unknown escape character"):
        hint = _escape_hint(line)
    if hint is None and "mapping values are not allowed" in problem:
        hint = _missing_colon(lines, mark.line, mark.column)
    if hint is None:
        hint = next((words for said, words in _HINTS if said in problem), None)
    return found, "valid YAML" if hint is None else f"valid YAML; this is likely {hint}"
