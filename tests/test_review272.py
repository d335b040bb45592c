"""Review round 272: this session's read-back changes (reviews 265, 267, 269; red-team 266, 268), as a
reviewer who certifies on the farm's green would read them.

1. Since review 265 a file of the cell's that the node has but cannot read is the cell's infra-error,
   retried. A kernel reaches its own run files (Landlock handles no chmod): one that failed and took the
   bits of its stdout (`fchmod(1, 0)`) or of its own cell folder was infra-error, "no evidence", tried
   three times (`retries: 2`), each try one more of the node's `unhealthy_after` infra failures in a row:
   its own `fail` turned into the node's trouble (exit 4, not 1), and the node retired for every later
   cell. The run files are the cell's own, made by the runner for that run alone: now, once the kernel
   and what it left are gone, the runner gives them and the cell's folder their owner's bits back (as it
   sets back the farm's shared folders, round 247) and reads them, so the kernel's own words judge it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_redteam244
from nodes import query
from test_redteam249 import RUNNERS, _farm

node_home = test_redteam244.node_home  # its fixture, by its name

# a kernel that fails, and on its way takes the owner's bits of its own stdout or of its own cell folder
# (its working folder is the cell's `work/`): nothing of it readable back, were they left so
HIDER = """\
#include <cstdio>
#include <sys/stat.h>
int main() {
    std::printf("toy: FAIL (max error 0.5)\\n");
    std::fflush(stdout);
    TAKE;
    return 1;
}
"""
TAKES = {"stdout": "fchmod(1, 0)", "folder": 'chmod("..", 0)'}


@pytest.mark.parametrize("take", sorted(TAKES))
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_failing_kernel_that_hides_its_own_output_is_its_fail_not_the_nodes_infra(
    node_home: Path, runner: str, take: str
) -> None:
    """Before: infra-error at run, "the node could not read back the cell's stdout" (or its run files
    "gone"), three tries, each counted against the node; exit 4. Figure: fail, on its exit 1 and its own
    words, read back in one try; exit 1."""
    said = _farm(node_home, "hider", HIDER.replace("TAKE", TAKES[take]), runner)
    rows = [dict(r) for r in query(node_home / "results.db", "SELECT outcome, reason, failed_stage FROM results")]
    tries = query(node_home / "results.db", "SELECT status FROM attempts WHERE kernel = 'hider'")
    assert [(r["outcome"], r["failed_stage"]) for r in rows] == [("fail", "run")], (rows, said.stdout[-2000:])
    assert "exit 1" in rows[0]["reason"] and "max error 0.5" in rows[0]["reason"], rows
    assert [t["status"] for t in tries] == ["ok"], [dict(t) for t in tries]
    assert said.returncode == 1, said.stdout[-2000:]
