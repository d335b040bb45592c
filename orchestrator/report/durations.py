"""How long a run or a cell took, from its stored start and end stamps.

Both are the farm host's wall clock, which can step (NTP correcting it, a clock set by hand): a
run marked aborted at the next start under a clock behind ended "before" it started, and its
JUnit `time` went negative (a CI server may reject the file) and so did a cell's on its page (a
review finding, 136). The stored stamps stay as the clocks read them: they are the record, and
an end before its start is the only trace that the clock stepped (clamped where stored, it would
read as a run of no time, the step hidden). The exports and pages clamp to 0 and say so.
"""

from __future__ import annotations

from datetime import datetime

CLOCK_STEPPED = "its end is stamped before its start: the farm host's clock stepped back, its duration is unknown"


def seconds(start: datetime | None, end: datetime | None) -> tuple[float, bool]:
    """(seconds from start to end, whether the clock stepped back between them); 0 seconds
    where either is missing or the end comes before the start."""
    if start is None or end is None:
        return 0.0, False
    taken = (end - start).total_seconds()
    return (0.0, True) if taken < 0 else (taken, False)
