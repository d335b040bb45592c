"""A marker written as the text the kernel prints rather than as the regular expression that
matches it: `PASS (4096 elements)` is a group, which matches the line without its parentheses,
and `[PASS]` a class of one letter. Each is valid RE2 that never matches the kernel's line, and
the run said only "no pass marker" beside a last line that looked the same (review 180)."""

from __future__ import annotations

import re

from orchestrator.run.streams import compile_marker

# an unescaped `(` (not `(?`), a body with no regex syntax, `)`, and no quantifier after it
_PLAIN_GROUP = re.compile(r"(?<!\\)(?:\\\\)*\((?!\?)([^()\[\]\\|.*+?{}^$]+)\)(?![*+?{])")
# an unescaped `[` (not `[^`), a body of letters, digits, blanks, `_` and `:` only, then `]`
_WORD_CLASS = re.compile(r"(?<!\\)(?:\\\\)*\[(?!\^)([A-Za-z0-9 _:]+)\]")


def literal_slip(pattern: str) -> str | None:
    """Why `pattern` likely meant its brackets literally, with the escaped form; else None."""
    group = _PLAIN_GROUP.search(pattern)
    if group is not None:
        body = group.group(1)
        return (
            f"a regular expression: {'(' + body + ')'!r} is a group, which matches {body!r} without its "
            f"parentheses; to match them write {_quoted(_escaped(pattern))} (or leave the parentheses out)"
        )
    word = _WORD_CLASS.search(pattern)
    if word is not None:
        body = word.group(1)
        if len(body) >= 3 or len(set(body)) < len(body):  # `[Ee]` is a class; `[PASS]`, `[ OK ]` are words
            return (
                f"a regular expression: {'[' + body + ']'!r} is a character class, which matches one "
                f"character of {body!r}; to match the brackets write {_quoted(_escaped(pattern))}"
            )
    return None


def _quoted(text: str) -> str:
    """As a YAML single-quoted scalar, the form the README's job files use (a backslash as is)."""
    return "'" + text.replace("'", "''") + "'"


def _escaped(pattern: str) -> str:
    """`pattern` with its plain groups' and word classes' brackets escaped."""
    text = _PLAIN_GROUP.sub(lambda m: m.group(0).replace("(", r"\(").replace(")", r"\)"), pattern)
    return _WORD_CLASS.sub(
        lambda m: (
            m.group(0).replace("[", r"\[").replace("]", r"\]")
            if len(m.group(1)) >= 3 or len(set(m.group(1))) < len(m.group(1))
            else m.group(0)
        ),
        text,
    )


def same_words(pass_marker: str, refusal_marker: str) -> str | None:
    """Why the refusal marker would read the pass marker's own line as a gate; else None."""
    if pass_marker == refusal_marker:
        return "a refusal marker other than the pass marker (they are the same: a gate's text is no pass)"
    line = pass_marker.encode()
    if compile_marker(pass_marker).search(line) and compile_marker(refusal_marker).search(line):
        # the pass marker is its own line (plain words): that line must never read as a refusal
        return (
            f"a refusal marker that does not match the pass marker's line (it matches {pass_marker!r}, "
            "so the kernel's pass line would read as its gate's text)"
        )
    return None
