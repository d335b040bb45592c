"""What a failed stage's reason ends with, so that it says what to fix (review findings, round 95):
a failed build's first error line (the verdict said only "the build exit 2", and nvcc's error was
at the foot of the cell's page, under the node's bundle folder), and a run without its pass marker's
pattern and last stdout line ("exit 0 but no pass marker on stdout": which pattern, against what)."""

from __future__ import annotations

import re

# nvcc's and gcc's "error:", ptxas' and nvcc's "fatal", ld's "cannot find -lx" and "undefined
# reference" (its "collect2: error: ld returned 1" comes after, and says nothing of which)
_ERROR = re.compile(r"\b(?:error|fatal)\b|cannot find -l|undefined reference", re.IGNORECASE)
# where the node keeps a shipped bundle (bundle.remote_dir): the project's own path is what follows
_BUNDLE = re.compile(r"(?:[^\s\"'(]*/)?bundles/[0-9a-f]{64}/")
_LIMIT = 300


def first_error(log: bytes) -> str:
    """`: "kernels/x.cu(3): error: ..."` for the build log's first error line, or "" for none."""
    for raw in log.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line and not line.startswith("[farm]") and _ERROR.search(line):
            line = _BUNDLE.sub("", line)
            return f': "{line if len(line) <= _LIMIT else line[: _LIMIT - 1] + "…"}"'
    return ""


def marker_missing(pattern: str, last_stdout: str) -> str:
    """` (pass marker 'PASS'; last stdout line: "Test passed")`, or with "stdout was empty"."""
    said = f'last stdout line: "{last_stdout}"' if last_stdout else "stdout was empty"
    shown = pattern if len(pattern) <= 120 else pattern[:119] + "…"
    return f" (pass marker {shown!r}; {said})"
