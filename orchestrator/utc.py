"""A stored or journaled time as an aware UTC datetime, to compare or print.

SQLite hands the farm's times back without their zone (they are stored as UTC); PostgreSQL's
and a journal's carry one. Comparing the two kinds raises TypeError, so every such comparison
goes through as_utc: store/completing.py and store/run_order.py each had their own copy.
"""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC, a naive one taken as UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
