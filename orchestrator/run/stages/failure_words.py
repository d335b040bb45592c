"""What a failed stage's reason ends with, so that it says what to fix (review findings, round 95):
a failed build's first error line (the verdict said only "the build exit 2", and nvcc's error was
at the foot of the cell's page, under the node's bundle folder), and a run without its pass marker's
pattern and last stdout line ("exit 0 but no pass marker on stdout": which pattern, against what),
and, where the marker read as plain text matches a line the regex does not (`toy: 1+1=2`, whose `+`
repeats), that line and the escaped marker (review 181)."""

from __future__ import annotations

import posixpath
import re
import unicodedata

from orchestrator.run.streams import ScanResult, scan_bytes

# nvcc's and gcc's "error:", ptxas' and nvcc's "fatal", ld's "cannot find -lx" and "undefined
# reference" (its "collect2: error: ld returned 1" comes after, and says nothing of which)
_ERROR = re.compile(r"\b(?:error|fatal)\b|cannot find -l|undefined reference", re.IGNORECASE)
# where the node keeps a shipped bundle (bundle.remote_dir): the project's own path is what follows
_BUNDLE = re.compile(r"(?:[^\s\"'(]*/)?bundles/[0-9a-f]{64}/")
_LIMIT = 300
# what a regular expression reads as syntax: written by a newcomer, each was most likely meant as text
_META = re.compile(r"[.^$*+?()\[\]{}|]")
PASS_TEXT = "pass-as-text"  # the stdout scan's name for the pass marker read literally (run.py)
PASS_BLANKS = "pass-but-blanks"  # the stdout scan's name for it, its `$` allowing blanks before it (run.py)


def first_error(log: bytes) -> str:
    """`: "kernels/x.cu(3): error: ..."` for the build log's first error line, or "" for none."""
    for raw in log.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line and not line.startswith("[farm]") and _ERROR.search(line):
            line = _BUNDLE.sub("", line)
            return f': "{line if len(line) <= _LIMIT else line[: _LIMIT - 1] + "…"}"'
    return ""


# a program's words for a file it could not open (C's perror, iostream checks, Python's errors)
_NOT_OPENED = re.compile(
    r"(?i)no such file|cannot open|can't open|could(?: not|n't) (?:open|read|find)|failed to (?:open|read)|"
    r"unable to (?:open|read)|not found|does not exist"
)


def unshipped_input(said: str, files: list[str]) -> str:
    """`; kernels/x/input.txt, which ... names, reached the build only: ...` where the kernel's last words
    name a file the job ships beside its sources (not one of them): a kernel that opens its data at run
    time from a relative path failed "cannot open input.txt", and its reason did not say why (review 195)."""
    if not _NOT_OPENED.search(said):  # a device assert names its header too ("k.cuh:42: ... Assertion")
        return ""
    for rel in files:
        base = re.escape(posixpath.basename(rel))
        if re.search(rf"(?:^|[^\w.-]){base}(?![\w.-])", said):
            return (
                f"; {rel}, which its last words name, is shipped for the build only: the run starts in an empty work "
                "folder of its own, so build the data into the binary (an array in a header it includes)"
            )
    return ""


def as_text(pattern: str) -> str | None:
    """The pass marker with its metacharacters escaped, the regex that matches its own text; None
    where it has none (the same regex) or holds a backslash (its author escaped what they meant)."""
    if "\\" in pattern or not _META.search(pattern):
        return None
    return _META.sub(lambda m: "\\" + m.group(0), pattern)


def literal_reading(pattern: str, stdout: bytes) -> tuple[int, str] | None:
    """The first stdout line (number, text) that `pattern`, read as plain text, matches; for tests
    and callers holding the output whole (the run stage scans its stream with PASS_TEXT instead)."""
    text = as_text(pattern)
    if text is None:
        return None
    seen = scan_bytes(stdout, {PASS_TEXT: text})
    line = seen.matches.get(PASS_TEXT)
    return None if line is None else (line, seen.texts[PASS_TEXT])


def with_end_blanks(pattern: str) -> str | None:
    """The marker, its closing `$` allowing a carriage return or blanks before it; None where it ends in
    none (an escaped `\\$` is text). Searched only where the marker matched no line, so a branch of
    the marker's before a `|` matched none either: a match of this one is at its end."""
    if not pattern.endswith("$") or (len(pattern) - 1 - len(pattern[:-1].rstrip("\\"))) % 2:
        return None
    return pattern[:-1] + r"[ \t\r\f\v]+$"


def as_yaml(text: str) -> str:
    """`text` as a YAML single-quoted scalar, as a job writes a marker (its backslashes single)."""
    return "'" + text.replace("'", "''") + "'"


def other_form(pattern: str) -> tuple[str, str, str] | None:
    """(the marker in the other Unicode normal form, its own form's name, the other's); None where
    it reads the same in both (ASCII: every marker of most jobs, at no cost)."""
    if pattern.isascii():
        return None
    nfc, nfd = unicodedata.normalize("NFC", pattern), unicodedata.normalize("NFD", pattern)
    if nfc == nfd:
        return None
    return (nfd, "NFC", "NFD") if pattern == nfc else (nfc, "NFD" if pattern == nfd else "neither", "NFC")


_NEVER = "the same letters as other code points, which a marker never matches: write it as the kernel prints it"


def near_miss(pattern: str, seen: ScanResult, stream: str, whose: str, blanks: bool = True) -> str:
    """`; stderr line 1, "needs CC 7.5", matches its refusal marker '...' but for a carriage return ...`
    where `pattern` matched no line of the stream but does without its `$`'s end (`blanks`), or
    written in the other Unicode normal form (NFC/NFD), or "". Looked for in the stream's kept copy
    after the run, only where a marker is missing: a healthy cell's scan pays nothing for it (review
    208). A line past the kept copy's cut is named without its number."""
    looks = {}
    if blanks and (ended := with_end_blanks(pattern)) is not None:
        looks["blanks"] = ended
    if (other := other_form(pattern)) is not None:
        looks["form"] = other[0]
    if not looks:
        return ""
    try:
        found = scan_bytes(seen.kept, looks, len(seen.kept) + 1)
    except ValueError:  # a form RE2 reads otherwise (a combining mark after a `(`): no hint, no failure
        return ""
    head = seen.kept[: seen.cut[0]].count(b"\n") if seen.cut else None
    said = ""
    for name, line in sorted(found.matches.items()):
        where = f"{stream} line {line}" if head is None or line <= head else f"a {stream} line"
        said += f'; {where}, "{found.texts[name]}", matches {whose}'
        if name == "blanks":
            said += (
                " but for a carriage return or blanks at its end, which the marker's $ does not allow before "
                "the line's end: end it in \\s*$ to allow them"
            )
        elif other is not None:
            said += f" written in another Unicode normal form (the line is {other[2]}, the marker {other[1]}): {_NEVER}"
    return said


def marker_missing(
    pattern: str,
    last_stdout: str,
    as_printed: tuple[int, str] | None = None,
    long_lines: int = 0,
    but_blanks: tuple[int, str] | None = None,
    near: str = "",
) -> str:
    """` (pass marker 'PASS'; last stdout line: "Test passed")`, or with "stdout was empty"; where
    the marker's text was printed (`as_printed`: its line's number and text), that it is a regex;
    stdout lines too long to be read for it (`long_lines`), and a line it matches but for a carriage
    return or blanks its `$` does not allow (`but_blanks`). The reason had quoted "toy: PASS" as the
    line that lacked the marker 'toy: PASS' and said neither (red-team 204)."""
    said = f'last stdout line: "{last_stdout}"' if last_stdout else "stdout was empty"
    if long_lines:
        said += (
            f"; {long_lines} stdout line{' was' if long_lines == 1 else 's were'} longer than 64 KiB, and a line "
            "that long is never read for a marker (a carriage return ends no line: a progress line rewritten "
            "with '\\r' is one line)"
        )
    if but_blanks is not None:
        said += (
            f'; stdout line {but_blanks[0]}, "{but_blanks[1]}", matches it but for a carriage return or blanks at '
            "its end, which the marker's $ does not allow before the line's end: end it in \\s*$ to allow them"
        )
    said += near  # near_miss: a line that is the marker in another Unicode normal form
    shown = pattern if len(pattern) <= 120 else pattern[:119] + "…"
    escaped = as_text(pattern)
    if as_printed is not None and escaped is not None:
        number, line = as_printed
        chars = list(dict.fromkeys(_META.findall(pattern)))
        quoted = as_yaml(escaped)  # the README's form
        quoted = quoted if len(quoted) <= 160 else quoted[:159] + "…"
        said += (
            f'; the pass marker is a regular expression: read literally it matches stdout line {number}, "{line}"; '
            f"escape its {' '.join(chars)} to match {'it' if len(chars) == 1 else 'them'} as text: {quoted}"
        )
    return f" (pass marker {shown!r}; {said})"
