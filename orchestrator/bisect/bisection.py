"""What `farm bisect` finds: each commit it judged (Tested, in a State), how the walk ended
(Ending), and the whole Bisection the command line prints and exits on (bisect/ walks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.errors import EXIT_INFRA, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.revisions import Commit


class State(StrEnum):
    GOOD = "good"  # every cell of the selection as expected
    BAD = "bad"  # a cell not as expected (a kernel verdict)
    SKIPPED = "untestable"  # the job does not load at this commit
    INFRA = "infra"  # a cell could not run: no verdict either way


class Ending(StrEnum):
    FOUND = "found"
    BAD_IS_GOOD = "bad-is-as-expected"
    GOOD_IS_BAD = "good-is-not-as-expected"
    AMBIGUOUS = "ambiguous"  # untestable commits hide which one it is
    OUTSIDE = "outside-git"  # same inputs, other verdict: the node, a dependency, or flakiness
    STOPPED = "stopped"  # infra, or a signal


@dataclass(frozen=True)
class Tested:
    """One commit judged: its state, and the result that decided it."""

    commit: Commit
    role: str  # "bad end", "good end", "step", "parent"
    state: State
    reason: str  # the deciding cell's outcome and reason, or why it could not be judged
    run_id: int | None = None
    result_id: int | None = None  # the deciding cell's result (its page is cells/ID.html)
    builds_reused: int = 0  # cells whose binary came from the node's cache, without nvcc
    exit_code: int = EXIT_OK  # the run's own exit code


@dataclass
class Bisection:
    selector: str
    node: str
    good: Commit
    bad: Commit
    paths: tuple[str, ...]  # the kernel's inputs, relative to the repository
    commits_in_range: int = 0  # every commit of the ancestry path GOOD..BAD
    candidates: int = 0  # ... of which touched the inputs
    tested: list[Tested] = field(default_factory=list)
    ending: Ending = Ending.STOPPED
    first_bad: Tested | None = None
    last_good: Tested | None = None  # the parent's verdict (its own run, or a commit of the same inputs)
    parent: Commit | None = None  # the first bad commit's first parent
    suspects: list[Commit] = field(default_factory=list)  # AMBIGUOUS: one of these is the first bad
    message: str = ""

    @property
    def runs(self) -> list[Tested]:
        return [t for t in self.tested if t.run_id is not None]

    @property
    def builds_reused(self) -> int:
        return sum(t.builds_reused for t in self.tested)

    @property
    def shown(self) -> Tested | None:
        """The tested commit whose cell page the user should read."""
        if self.first_bad is not None:
            return self.first_bad
        # a run with no cell of the watched ones has no page: "cells/None.html" was printed
        judged = [t for t in self.runs if t.result_id is not None]
        return next((t for t in reversed(judged) if t.state is not State.GOOD), None) or (
            judged[-1] if judged else None
        )

    @property
    def exit_code(self) -> int:
        if self.ending is Ending.FOUND:
            return EXIT_OK
        if self.ending is Ending.STOPPED:
            last = self.runs[-1].exit_code if self.runs else EXIT_INFRA
            return last if last > EXIT_UNEXPECTED else EXIT_INFRA  # 70 stays 70
        return EXIT_UNEXPECTED
