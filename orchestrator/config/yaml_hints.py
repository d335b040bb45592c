"""What a malformed YAML file's author is told: where, the line as written, and the likely fix.

PyYAML's own words ("did not find expected key", "mapping values are not allowed here",
"found character that cannot start any token") name a parser state, not the author's
mistake: a kernel author who indented a key one space off, wrote a tab, or left a pass
marker holding ': ' unquoted was told only "expected valid YAML" (review 107).
"""

from __future__ import annotations

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
    if hint is None:
        hint = next((words for said, words in _HINTS if said in problem), None)
    return found, "valid YAML" if hint is None else f"valid YAML; this is likely {hint}"
