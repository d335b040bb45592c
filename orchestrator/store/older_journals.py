"""A result journaled by an earlier farm, stored as that farm's database rows are after their
migrations: the flags a later revision added are filled by the rule that revision's migration
applied to the rows already stored (`farm import`, and the completion of a run its farm left).

A journal of a farm before 0016 has no `farm_writable`: its result took the column's default,
false, so a pass that ran unconfined on the farm's own machine (a `local` node, as the farm's
user) certified on import, where the same run upgraded in its database certifies nothing
(red-team 215). 0015's `cuda_waived` is cuda_waiver.journaled's.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.cuda_waiver import journaled

# 0016's rule: the stage detail base._note_confinement wrote of an unconfined run, on a local node's result
UNCONFINED = " ran unconfined ("


def transports(records: list[tuple[str, dict[str, Any]]]) -> dict[Any, Any]:
    """Each journaled snapshot's transport, by its ref (a result's `snapshot_ref`)."""
    return {fields.get("ref"): fields.get("transport") for kind, fields in records if kind == "snapshot"}


def as_stored(fields: dict[str, Any], transport: Any) -> dict[str, Any]:
    """A journal's result fields with every flag a later revision added: the journal's own where
    its farm wrote one, else the rule of the migration that added it (0015, 0016)."""
    fields = journaled(fields)
    if "farm_writable" not in fields:
        details = json.dumps(fields.get("stage_details"), ensure_ascii=False)  # the text 0016's instr() read
        fields["farm_writable"] = transport == "local" and UNCONFINED in details
    return fields
