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


# what a YAML double-quoted escape made of a regex's own: `"\bPASS\b"` is PASS between backspaces
_YAML_ESCAPES = {
    "\b": "\\b",
    "\a": "\\a",
    "\f": "\\f",
    "\v": "\\v",
    "\x1b": "\\e",
    "\0": "\\0",
    "\n": "\\n",
    "\r": "\\r",
}


def control_slip(pattern: str, key: str) -> str | None:
    """Why a marker holding a control character (a tab aside) can match no line the kernel prints."""
    controls = [c for c in pattern if (c < " " and c != "\t") or c == "\x7f"]
    if not controls:
        return None
    escape = _YAML_ESCAPES.get(controls[0])
    said = f"U+{ord(controls[0]):04X}" + (f", which YAML reads from {escape} in double quotes" if escape else "")
    meant = "".join(_YAML_ESCAPES.get(c, c) for c in pattern)
    example = f": {key}: {_quoted(meant)}" if all(c in _YAML_ESCAPES for c in controls) else ""
    return (
        f"a regular expression without control characters (it holds {said}); write the marker in "
        f"single quotes, where a backslash is the regular expression's{example}"
    )


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
    refusal = compile_marker(refusal_marker)
    for line in _pass_lines(pass_marker):
        if refusal.search(line.encode()):
            # a line the pass marker itself matches (its plain words, or `PASS \(\d+ elements\)` read as
            # `PASS (1 elements)`): the kernel's pass line must never read as a refusal
            return (
                f"a refusal marker that does not match the pass marker's line (it matches {line!r}, "
                "so the kernel's pass line would read as its gate's text)"
            )
    return None


# a regex's simplest pieces, each with the text it stands for; anything else leaves a line unguessed
_PIECE = re.compile(r"\\([dws])|\\([^A-Za-z0-9])|\\b|([+*?])|([^\\()\[\]{}|.^$+*?])")
_STANDS_FOR = {"d": "1", "w": "a", "s": " "}


def _pass_lines(pass_marker: str) -> list[str]:
    r"""Lines the pass marker matches, written out from its plain pieces: its own words, and each
    top-level alternative with `\d`, `\s`, `\w` and escaped punctuation read as text. Only a line
    the marker really matches is returned (a marker of groups or classes gives its own words only)."""
    lines = [pass_marker]
    if "(" not in pass_marker.replace("\\(", ""):  # `|` outside any group splits alternatives
        lines += re.split(r"(?<!\\)\|", pass_marker)
    compiled = compile_marker(pass_marker)
    out: list[str] = []
    for alternative in lines:
        text: list[str] = []
        at = 0
        for piece in _PIECE.finditer(alternative.strip("^$")):
            if piece.start() != at:
                break
            at = piece.end()
            klass, punct, _, char = piece.groups()
            text.append(_STANDS_FOR[klass] if klass else punct or char or "")
        line = "".join(text)
        if at == len(alternative.strip("^$")) and line and compiled.search(line.encode()) and line not in out:
            out.append(line)
    if compiled.search(pass_marker.encode()) and pass_marker not in out:
        out.insert(0, pass_marker)
    return out
