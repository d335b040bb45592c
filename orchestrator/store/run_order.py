"""Whether a journal's run may be imported as the newest run of a database (recovery.py).

The database's own order is its run ids: every standing query takes the highest id as the
newest. A journal records no id, only its start by the farm host's clock, which can step: one
run stored under a clock years ahead (then NTP corrected) had the latest start, and refused every
later run's journal for years when the check took the latest start for the newest run (a
red-team finding, round 131). The newest run is the highest id here.

A journal's own start can be ahead too: a run under a clock hours ahead lost its database
writes, the next night's run (the clock corrected) stored a newer verdict, and the journal,
stamped "later", was imported as the newest run over it, its older pass standing over the newer
fail (round 158). A start after this host's clock now was read by a clock that was ahead: it
tells nothing of the run's order, so such a journal is imported only where the operator says.

The newest run's own start can be behind: a night's run under a clock stepped back stamped a start
before the run before it, and the journal of the night between read as after it (round 246). A
newest run that started before an earlier one (by a clock this host's has passed) orders nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.store.tables import Run
from orchestrator.utc import as_utc

# how far a journal's start may read after this host's clock now and still be taken as read by a
# clock that agrees with it (two hosts' clocks, NTP-kept, differ by well under this)
CLOCK_SLACK = timedelta(minutes=1)


def check_after_newest(session: Session, path: Path, started: Any, url: str, given_order: bool) -> None:
    """StoreError where the journal's run started before the newest run here (the highest id):
    imported, an older run would pass for the newest. `given_order`: the operator says it came
    after (`farm import --in-given-order`), where the newest run's start is not to be trusted."""
    newest = session.scalars(select(Run).order_by(Run.id.desc()).limit(1)).first()
    if given_order or newest is None or not isinstance(started, datetime):
        return
    theirs = as_utc(newest.started_at)
    if as_utc(started) > datetime.now(UTC) + CLOCK_SLACK:
        raise StoreError(
            f"{path}: its run started {as_utc(started).isoformat(timespec='seconds')}, after this host's clock "
            f"now: its farm host's clock was ahead, and its start cannot tell whether it came before or after "
            f"run {newest.id}, the newest in {url}. Where it came after, import it with `farm import "
            "--in-given-order JOURNAL...`; where before (a run whose database writes were lost, a later night's "
            "run already stored), import it into a database of its own (farm import JOURNAL --database "
            "sqlite:///recovered.db): as the newest run, its verdicts would stand over the later run's"
        )
    if as_utc(started) >= theirs:
        _check_newest_not_behind(session, path, newest, url)
        return
    said = (
        f"{path}: its run started {as_utc(started).isoformat(timespec='seconds')}, before run "
        f"{newest.id} ({theirs.isoformat(timespec='seconds')}) already in {url}; "
    )
    if theirs > datetime.now(UTC):  # a start no clock could have read yet: the farm host's was ahead
        raise StoreError(
            said + f"run {newest.id}'s start is after this host's clock now, so its farm host's clock was ahead "
            "and the starts cannot tell which run came first. Where this journal's run came after it, "
            "import it with `farm import --in-given-order JOURNAL...` (the journals as newer than the "
            "database's newest run, in the order given)"
        )
    raise StoreError(
        said + "import journals oldest first (farm import takes several and sorts them). "
        "A run newer than it is already there (a later night's): its standing would go back in time; "
        "import it into a database of its own (farm import JOURNAL --database sqlite:///recovered.db) "
        "and read it there (farm report --database sqlite:///recovered.db --out DIR)"
    )


def _check_newest_not_behind(session: Session, path: Path, newest: Run, url: str) -> None:
    """StoreError where the newest run's start is before an earlier run's that this host's clock
    has passed: the newest run's farm host's clock was behind (stepped back, a machine resumed from
    a snapshot), and a journal's start after it tells nothing of which run came first. Such a
    journal of the night between (its database writes lost) was imported as the newest run, its
    older verdicts over the later night's (red-team 246). An earlier start after this host's clock
    now is a clock that was ahead, and says nothing of the newest run's (round 131)."""
    theirs, now = as_utc(newest.started_at), datetime.now(UTC) + CLOCK_SLACK
    earlier = [
        (as_utc(started), rid)
        for rid, started in session.execute(select(Run.id, Run.started_at).where(Run.id < newest.id))
        if theirs + CLOCK_SLACK < as_utc(started) <= now
    ]
    if not earlier:
        return
    when, rid = max(earlier)
    raise StoreError(
        f"{path}: run {newest.id}, the newest in {url}, started {theirs.isoformat(timespec='seconds')}, before "
        f"run {rid} ({when.isoformat(timespec='seconds')}), which came before it: run {newest.id}'s farm host's clock "
        "was behind (stepped back, a machine resumed from a snapshot), and the starts cannot tell whether this "
        f"journal's run came before or after run {newest.id}. Where it came after, import it with `farm import "
        "--in-given-order JOURNAL...`; where before (a run whose database writes were lost, a later night's run "
        "already stored), import it into a database of its own (farm import JOURNAL --database "
        "sqlite:///recovered.db): as the newest run, its verdicts would stand over the later run's"
    )
