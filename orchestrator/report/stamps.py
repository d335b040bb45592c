"""A page's stamp: what lets a render leave a page on disk as it is.

A cell page shows one result and what came before it, a finished run's page one
run: once written they cannot change. Each carries a stamp on its second line
(its result or run, that run's start and status, and a digest of the templates and of the
code that fills them), and a whole page whose stamp is already on disk is not
rendered again; a change to that code renders every page again.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

# what decides a page's bytes besides the database: a change to any of these renders every page again
PAGE_SOURCES = (
    *("site.py", "cell_pages.py", "stamps.py", "grids.py", "cell_page.py", "escape.py", "model.py", "kernel_inputs.py"),
    *("history.py", "trends.py", "standing.py", "../outcomes.py", "../metrics.py", "../terminal.py"),
    # the words of why a cell certifies nothing, on its page: a change to them left finished pages as they were
    *("unbacked.py", "../farm_writable.py"),
    # a run page's heads: the card's words, "(stand-in)" (review 240)
    "card_heads.py",
    # a run page's cells with no result and its split counts (review 259)
    "unfinished_cells.py",
)


@functools.cache
def page_format() -> str:
    """A digest of the templates and of the code that fills them: part of every
    stamp, so pages written by another version of the farm are rendered again."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted((here / "templates").glob("*.j2")), *(here / name for name in PAGE_SOURCES)]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def _moment(started: datetime) -> str:
    # to the microsecond: with the id, it tells this run from another database's run of the same id
    moment = started if started.tzinfo else started.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def cell_stamp(result_id: int, run_id: int, started: datetime, status: str, flags: Sequence[str] = ()) -> str:
    # the run's status too: a page says whether its run had finished, and one written while it
    # ran said "had not finished" for good, every later render finding its stamp (a red-team finding);
    # and its flags (grids.since_flags): a job or inputs changed since the page was written
    moment = _moment(started)
    flagged = f", flagged {hashlib.sha256(chr(0).join(flags).encode()).hexdigest()[:16]}" if flags else ""
    return (
        f"farm page {page_format()}: result {int(result_id)} of run {int(run_id)} started {moment}, {status}{flagged}"
    )


def run_stamp(run_id: int, started: datetime, status: str, linked: bool, flagged: Iterable[int] = ()) -> str:
    state = f"{status}, {'linked' if linked else 'plain'}"
    if flagged:  # its cells the matrix flags as of a job or inputs changed since: grey on the page too
        state += f", flagged {hashlib.sha256(repr(sorted(flagged)).encode()).hexdigest()[:16]}"
    return f"farm page {page_format()}: run {int(run_id)} started {_moment(started)}, {state}"


PAGE_END = b"</html>"  # the last bytes of every page (base.html.j2); never in a page's escaped text


def stamped(path: Path, stamp: str) -> bool:
    """Whether the page on disk carries this stamp (its second line, base.html.j2)
    and is whole (it ends as every page does: see pagewriter.write_fresh)."""
    try:
        with open(path, "rb") as page:
            head = page.read(1024)
            page.seek(-len(PAGE_END), os.SEEK_END)
            end = page.read()
    except OSError:  # not there, or shorter than its end
        return False
    lines = head.split(b"\n", 2)
    return len(lines) > 2 and lines[1] == f"<!-- {stamp} -->".encode() and end == PAGE_END
