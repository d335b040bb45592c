"""A node short of room after a failed stage that ran unconfined: the kernel's verdict, not the node's.

After a failed stage the farm looks at the node (stages/base.py `_node_trouble`): a work or
temporary folder short of room, or a work folder no file can be made in, makes the failure
infra-error, retried, since a disk another tenant filled fails any kernel. Confined by Landlock a
run cannot write the node's temporary folder (red-team round 49). Unconfined (the shell runner of
nodes without python3, a node kernel without Landlock) a kernel that filled `$TMPDIR` and then
failed its numbers left the node short of room by its own hand, and its `fail` read as the node's
trouble on every try: a broken kernel hidden as a flaky node (red-team round 120); so did a build
that filled it and failed. There the stage's failure is judged as the kernel's, its reason saying
what the look found: the farm cannot tell the node's room from what the stage took. A work folder
turned read-only stays the node's: no stage without root remounts it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from orchestrator.outcomes import Outcome, is_infra

if TYPE_CHECKING:
    from orchestrator.classify import Evidence
    from orchestrator.plan import Expectation

# the look's words for a folder short of room (stages/base.py): a read-only file system (EROFS) is no
# doing of a stage without root, and stays the node's
ROOM_SHORT = "the node ran out of room during the cell"
V = TypeVar("V")  # classify.Verdict, which this module cannot import (classify imports it)


def room_taken(
    judge: Callable[[Evidence, Expectation], V], ev: Evidence, exp: Expectation, unconfined: Collection[str]
) -> V:
    """`judge(ev, exp)` (classify), but where that is infra-error for the room the look found short
    after a failed stage of `unconfined` (those that ran unconfined), the verdict without it, saying why."""
    verdict = judge(ev, exp)
    stage = getattr(verdict, "failed_stage", None)
    short = ev.folder_trouble.startswith(ROOM_SHORT)
    if stage not in unconfined or not short or getattr(verdict, "outcome", None) is not Outcome.INFRA_ERROR:
        return verdict
    trouble, ev.folder_trouble = ev.folder_trouble, ""
    try:
        kernels = judge(ev, exp)
    finally:
        ev.folder_trouble = trouble
    if is_infra(getattr(kernels, "outcome", Outcome.INFRA_ERROR)):  # the node's for another reason too
        return verdict
    said = (
        f"{getattr(kernels, 'reason', '')}; after it {trouble}, but its {stage} ran unconfined (no Landlock, or "
        "the shell runner) and could have taken that room itself, so this is no node fault"
    )
    return replace(kernels, reason=said)
