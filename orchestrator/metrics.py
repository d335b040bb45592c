"""Speed as evidence: a job's metrics, read from what its kernel printed and
judged against the cell's own recent past.

A kernel's stdout is untrusted: it may print its figure a thousand times, print
"nan", "inf" or 1e999, or print it only inside the bytes the farm left out of
its kept copy. So a value is taken by one rule, and otherwise recorded as *no
value*, with why, never guessed:

- the metric's regex is matched line by line (as markers are, with RE2, linear
  time), over the stdout as stored; its first group on the **last** matching
  line is the value (a kernel that prints progress ends with its final figure);
  a line longer than MAX_LINE is never read;
- the group must be a plain decimal number ("12", "-3.5", "1.2e3") of at most
  64 characters that is finite as a double: "nan", "inf", "1e999", "0x10" and
  "1_000" are no value;
- where the kept copy was cut and no line after the cut matches, there is no
  value: the real last line may be in the bytes left out;
- a metric without a regex is the kernel's own seconds on the node (the run
  stage's clock on the node: no queueing for the GPU, no transfer).

The baseline of a value is the cell's (kernel, variant, node, card model) last
BASELINE values of that metric from earlier results that had one, on the very card
the run had where the farm knows it (its UUID: another card's speed is no yardstick). With fewer
there is no verdict on speed. A value worse than their median by more than the
metric's tolerance, as a fraction of the median's size, has *regressed*
(classify/ makes a passing cell perf-regression); a median of 0 has no size
to be a fraction of, and gives no verdict.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.run.streams import MAX_LINE, compile_marker

if TYPE_CHECKING:
    from orchestrator.config.job_spec import MetricSpec

BASELINE = 5  # earlier values a verdict needs: the median of the cell's last 5
NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
NUMBER_CHARS = 64
QUOTE_CHARS = 120  # of the matched line, quoted in the value's note
BLOCK = 64 * 1024  # bytes searched at once, from the end, before the lines of a hit are tried
SLACK = 1e-9  # "more than the tolerance": a value exactly at it, give or take rounding, is not worse
RUN_SECONDS = "the kernel's own seconds on the node"


@dataclass(frozen=True)
class Measured:
    """One metric of one cell: its value (None: no value, `note` says why), what
    it is compared against, and how it was found."""

    name: str
    unit: str
    better: str  # higher | lower
    tolerance: float  # a fraction: 0.1 is 10 %
    value: float | None
    note: str  # where the value came from, or why there is none
    baseline: tuple[float, ...] = ()  # the cell's earlier values, oldest first
    scope: str = ""  # whose values they are, in words: " on this card" where the card's own

    @property
    def median(self) -> float | None:
        """The median of the last BASELINE earlier values; None with fewer."""
        if len(self.baseline) < BASELINE:
            return None
        return float(statistics.median(self.baseline[-BASELINE:]))

    @property
    def worse_by(self) -> float | None:
        """How much worse than the median, as a fraction of its size (0.3: 30 %
        worse; negative: better); None when there is no verdict."""
        return worse_by(self.value, self.median, self.better)

    @property
    def regressed(self) -> bool:
        worse = self.worse_by
        return worse is not None and worse > self.tolerance + SLACK

    def words(self) -> str:
        """The verdict on speed, in a reviewer's words."""
        if self.value is None:
            return f"{self.name}: no value ({self.note})"
        shown = f"{self.name} {number(self.value)} {self.unit}"
        median, worse = self.median, self.worse_by
        if median is None:
            return f"{shown} (no verdict: {len(self.baseline)} of {BASELINE} earlier values{self.scope})"
        if worse is None:
            return f"{shown} (no verdict: the median of its last {BASELINE} is 0)"
        if self.regressed:
            return regression_words(self.name, self.value, self.unit, median, self.tolerance, self.better, self.scope)
        return f"{shown} against the median {number(median)} of its last {BASELINE} results{self.scope}"

    def record(self) -> dict[str, Any]:
        """What the store keeps of it (tables.py MetricValue)."""
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "better": self.better,
            "tolerance": self.tolerance,
            "note": self.note,
            "baseline": self.median,
            "regressed": self.regressed,
        }


def stored_words(row: Any) -> str:
    """A stored value's verdict on speed in words (a metric_values row: its median, not the values
    it came from), as the JSON export gives it beside the figures."""
    if row.value is None:
        return f"no value ({row.note})"
    if row.regressed and row.baseline is not None:
        return regression_words(row.name, row.value, row.unit, row.baseline, row.tolerance, row.better)
    if row.baseline is None:
        return f"no verdict: fewer than {BASELINE} earlier values on record"
    return f"within the tolerance of the median {number(row.baseline)} of its last {BASELINE} results"


def worse_by(value: float | None, median: float | None, better: str) -> float | None:
    """How much worse `value` is than `median`, as a fraction of the median's size
    (negative: better); None without both, or with a median of 0."""
    if value is None or median is None or median == 0:
        return None
    change = median - value if better == "higher" else value - median
    return change / abs(median)


def regression_words(
    name: str, value: float, unit: str, median: float, tolerance: float, better: str, scope: str = ""
) -> str:
    """ "gflops 70 GFLOP/s is 30 % worse than the median 100 of its last 5 results (...)"."""
    worse = worse_by(value, median, better) or 0.0
    return (
        f"{name} {number(value)} {unit} is {percent(worse)} worse than the median {number(median)} of its "
        f"last {BASELINE} results{scope} ({better} is better; tolerance {percent(tolerance)})"
    )


def number(value: float) -> str:
    """A value as a page shows it: 4 significant digits ("100", "0.0123", "1.5e+12")."""
    return f"{value:.4g}"


def percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %" if abs(fraction) >= 0.1 else f"{fraction * 100:.1f} %"


def _quote(line: bytes) -> str:
    text = "".join(c if c.isprintable() else "?" for c in line.decode("utf-8", "replace").strip())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"


def _last_matching_line(regex: Any, data: bytes) -> tuple[Any, bytes] | None:
    """The match on the last line of `data` that the regex matches, with the line.
    Searched from the end a block of whole lines at a time (RE2 over a block is
    fast); only a block with a hit is tried line by line, so a match that spans
    lines never counts."""
    end = len(data)
    while end > 0:
        start = 0 if end <= BLOCK else data.rfind(b"\n", 0, end - BLOCK) + 1
        block = data[start:end]
        if regex.search(block) is not None:
            for line in reversed(block.split(b"\n")):
                if len(line) <= MAX_LINE and (match := regex.search(line)) is not None:
                    return match, line
        end = start
    return None


def stdout_value(
    pattern: str, kept: bytes, cut: tuple[int, int] | list[int] | None, size: int
) -> tuple[float | None, str]:
    """(value, note) of a metric regex over a stored stdout: `kept` is the copy the
    farm kept, `cut` the [start, end) bytes of the stream left out of it (streams.py),
    `size` the stream's full size."""
    regex = compile_marker(pattern)
    if cut:
        start, end = int(cut[0]), int(cut[1])
        head = kept[:start]
        tail = kept[len(kept) - max(size - end, 0) :] if size > end else b""
        head = head[: head.rfind(b"\n") + 1]  # the line the cut went through is whole in neither part
        tail = tail[tail.find(b"\n") + 1 :] if b"\n" in tail else b""
        found = _last_matching_line(regex, tail)
        if found is None:
            if _last_matching_line(regex, head) is not None:
                return None, f"its last matching line may be in the {end - start} bytes of stdout left out"
            return None, "no stdout line matched its regex"
    else:
        found = _last_matching_line(regex, kept)
        if found is None:
            return None, "no stdout line matched its regex"
    match, line = found
    group = match.group(1)
    text = (group or b"").decode("ascii", "replace").strip()
    quoted = f'from the last matching stdout line "{_quote(line)}"'
    if len(text) > NUMBER_CHARS or not NUMBER_RE.fullmatch(text):
        return None, f'not a plain number ("{_quote(text.encode())}") {quoted}'
    value = float(text)
    if not math.isfinite(value):
        return None, f"not a finite number ({text[:20]}…) {quoted}"
    return value, quoted


def measure(
    specs: Mapping[str, MetricSpec],
    kept: bytes,
    cut: tuple[int, int] | None,
    size: int,
    run_seconds: float | None,
    baseline: Callable[[list[str]], Mapping[str, list[float]]],
    scope: str = "",
) -> tuple[Measured, ...]:
    """Each metric of a job for one cell's run, with its baseline (`baseline`:
    metric names -> their earlier values, oldest first; asked only for the
    metrics that found a value)."""
    found: list[tuple[str, MetricSpec, float | None, str]] = []
    for name, spec in specs.items():
        if spec.regex is None:
            finite = run_seconds is not None and math.isfinite(run_seconds)
            value, note = (run_seconds, RUN_SECONDS) if finite else (None, "the run stage has no seconds")
        else:
            value, note = stdout_value(spec.regex, kept, cut, size)
        found.append((name, spec, value, note))
    wanted = [name for name, _spec, value, _note in found if value is not None]
    earlier = baseline(wanted) if wanted else {}
    return tuple(
        Measured(
            name,
            spec.unit,
            spec.better,
            spec.tolerance,
            value,
            note,
            tuple(earlier.get(name, ())) if value is not None else (),
            scope,
        )
        for name, spec, value, note in found
    )
