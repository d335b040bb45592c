"""Red-team round 247: a kernel that breaks the node's own farm folders, and what the later cells say.

Broke (before/after): Landlock (run/node/confine.py) handles no chmod. A kernel that took every bit
of its node's `cells/` folder (the work folder's subfolder where each cell's copy of its binary goes)
passed, and every later cell of the node, and the kernel's own retry, was infra-error "the binary
changed while it was copied into the cell's folder (... copy missing)": the copy had failed silently
(run/node/files.py take_copy), and the node stayed broken for every later run. Now the runner notes the
modes of the farm's own folders above the cell's before its run and compares them after: one changed is
set back, and the kernel's cell says so (no pass: the kernel harmed its node); a copy that cannot be
made says why, naming the folder and its mode.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import test_redteam244
from test_redteam244 import BUILD, VICTIM, _rows

node_home = test_redteam244.node_home  # its fixture, by its name

RUNNERS = ("python", "shell")


def _farm(root: Path, kernels: dict[str, tuple[str, str]], runner: str) -> subprocess.CompletedProcess[str]:
    """test_redteam244's farm (its node the login's own toolkit, run as that user), its cells run by
    RUNNER: the node's python3, or the shell scripts (`runner: shell`)."""
    real = Path.write_text

    def config(path: Path, text: str, *args: object, **kwargs: object) -> int:
        if path.name == "farm.yaml" and runner == "shell":
            text += "    runner: shell\n"
        return real(path, text, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "write_text", config)
        return test_redteam244._farm(root, kernels)


BREAKER = r"""
#include <cstdio>
#include <sys/stat.h>
int main() {
    chmod("TARGET", 0);  // Landlock handles no chmod
    std::printf("toy: PASS\n");
    return 0;
}
"""


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_kernel_that_takes_the_bits_of_the_cells_folder_is_caught_at_its_own_cell(
    node_home: Path, runner: str
) -> None:
    """Before: the breaker's own cell and the victim after it were infra-error "the binary changed
    while it was copied into the cell's folder (built ..., copy missing)", and the node's cells/
    folder was left mode 000. Figure: the breaker's cell is a fail naming the folder and its mode
    000, the victim passes, and the folder has its bits back."""
    cells = node_home / "node" / "cells"
    breaker = BREAKER.replace("TARGET", str(cells))
    done = _farm(node_home, {"abreaker": (breaker, BUILD), "victim": (VICTIM, BUILD)}, runner)
    said = (done.stdout[-3000:], done.stderr[-2000:])
    rows = _rows(node_home, "abreaker")
    assert [r["outcome"] for r in rows] == ["fail"], (rows, said)
    assert str(cells) in rows[0]["reason"] and "mode 000" in rows[0]["reason"], rows[0]["reason"]
    assert [r["outcome"] for r in _rows(node_home, "victim")] == ["pass"], (_rows(node_home, "victim"), said)
    assert cells.stat().st_mode & 0o700 == 0o700, oct(cells.stat().st_mode)
    assert done.returncode == 1, said


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_copy_that_cannot_be_made_says_the_folder_and_its_mode(node_home: Path, runner: str) -> None:
    """Before: a build that took the write bits of the node's work folder (Landlock handles no chmod),
    where the cell's folder is yet to be made, left its cell infra-error "the binary changed while it
    was copied into the cell's folder (... copy missing)": the copy had failed unsaid. Figure:
    infra-error naming the folder and its mode 555. (Since red-team 249 a build's chmod is set back
    before the copy, and the build blamed: here cells/ was left mode 555 before the run, by no stage
    of it, as a node broken before that round was.)"""
    cells = node_home / "node" / "cells"
    cells.mkdir(parents=True)
    subprocess.run(["chown", "-R", f"{os.stat(node_home).st_uid}:{os.stat(node_home).st_gid}", str(cells.parent)])
    cells.chmod(0o555)
    try:
        done = _farm(node_home, {"victim": (VICTIM, BUILD)}, runner)
    finally:
        cells.chmod(0o755)
    rows = _rows(node_home, "victim")
    assert [r["outcome"] for r in rows][-1:] == ["infra-error"], (rows, done.stdout[-3000:])
    assert f"{cells} (mode 555)" in rows[-1]["reason"], rows[-1]["reason"]
    assert "copy missing" not in rows[-1]["reason"], rows[-1]["reason"]


def test_a_node_fault_found_after_its_builds_retires_the_node_not_each_cell(node_home: Path) -> None:
    """Before: with the node's own toolkit header unreadable (round 244's finding), each of the node's
    six cells built once and was its own infra-error naming the header: the node was never marked
    unhealthy (a fault found by the look after a failed stage counted as a sound cell). Figure: after
    `unhealthy_after` (3) such cells in a row, the rest are skipped, "marked unhealthy for this run"
    with the header's words, unbuilt."""
    header = node_home / "cuda" / "include" / "cuda_runtime.h"
    header.chmod(0)
    kernels = {f"v{i}": (VICTIM, BUILD) for i in range(6)}
    done = _farm(node_home, kernels, "python")
    rows = [row for i in range(6) for row in _rows(node_home, f"v{i}")]
    said = (rows, done.stdout[-3000:])
    assert [r["outcome"] for r in rows] == ["infra-error"] * 6, said
    assert all(str(header) in r["reason"] for r in rows), said
    skipped = [r for r in rows if "marked unhealthy for this run" in r["reason"]]
    assert 1 <= len(skipped) <= 3, said
