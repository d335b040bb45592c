"""Review round 274: a job's build command that took the read bit of its own build log.

Review 265 made a file the node has but cannot read back the cell's infra-error (no evidence); review 272
gave a run's own files their owner's bits back once the kernel is gone, so a failing kernel that took
them is its own `fail`. A build or inspect command could still do the same to its own log or dump:
`nvcc ...; chmod 0 build.log` made a kernel's compile error the node's infra-error "could not read back
the cell's log", tried three times and counted against the node's health (`unhealthy_after`). Now any
file the farm reads back that the login owns gets its owner's read bit first (frames.emit,
node/stage_flow.frame), and is read: the build's error is the kernel's build-fail, in the compiler's
words. A file the login does not own, or a folder of the farm's above it taken at 000, stays unread.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_redteam244
from test_redteam244 import _rows
from test_redteam247 import RUNNERS, _farm

node_home = test_redteam244.node_home  # its fixture, by its name

BROKEN = "int main() { return not_declared_anywhere; }\n"
HIDES_ITS_LOG = "{nvcc} -arch=sm_75 -o {binary} {sources}; r=$?; chmod 0 build.log; exit $r"


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_build_that_takes_the_bits_of_its_own_log_is_its_build_fail(node_home: Path, runner: str) -> None:
    """Before: infra-error (the node could not read back the cell's log; retried, counted against the
    node). Figure: build-fail naming the compiler's error, `farm verify` exit 1."""
    done = _farm(node_home, {"hider": (BROKEN, HIDES_ITS_LOG)}, runner)
    rows = _rows(node_home, "hider")
    said = (rows, done.stdout[-3000:])
    assert [r["outcome"] for r in rows] == ["build-fail"], said
    assert "not_declared_anywhere" in rows[0]["reason"], said
    assert done.returncode == 1, said
