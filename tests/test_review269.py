"""Review round 269: a runner whose stdin a login's reader took said nothing the farm could read.

CI (session 47, review 128's `auto` case) saw a node whose ~/.bashrc leaves `cat <&0 &` running:
the reader took part of a cell's input, and the node's python3 bootstrap (run/commands.py
runner_command) ended in "EOFError: EOF read where object expected" (marshal of nothing), so the cell
was infra-error "the cell's command never said which stages it ran" with no word of the start-up
file. Without the farm's compiled code the bootstrap compiled an empty read into nothing and ended
0, silently; the runner's own plan read (node/serve.py) raised the same bare EOFError. Now each says
"farm-runner: stdin ended early", the words stdin_gate.stdin_hint knows, and the cell's reason
carries the hint to fix the start-up file.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.run.commands import runner_command
from orchestrator.run.probe import RUNNER_SOURCE
from orchestrator.run.runner_code import compiled
from orchestrator.transport.stdin_gate import STDIN_HINT, stdin_hint


def _run(command: str, given: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["sh", "-c", command], input=given, capture_output=True, timeout=60)


@pytest.mark.parametrize("kept", [0, 1, 100, None], ids=["nothing", "one-byte", "part-of-code", "no-plan"])
@pytest.mark.parametrize("code", [True, False], ids=["compiled", "source"])
def test_a_runner_given_its_input_cut_short_says_so_in_the_farms_words(kept: int | None, code: bool) -> None:
    """Before: "EOFError: EOF read where object expected" (or, from source, exit 0 and nothing said).
    Figure: a non-zero exit saying "farm-runner: stdin ended early", which the hint names."""
    version, blob = (sys.version, compiled(RUNNER_SOURCE)) if code else ("", b"")
    command, given = runner_command(sys.executable, version, blob)
    done = _run(command, given if kept is None else given[:kept])  # None: the runner whole, its plan taken
    said = done.stderr.decode()
    assert done.returncode != 0 and "farm-runner: stdin ended early" in said, (done.returncode, said[-500:])
    assert STDIN_HINT in stdin_hint(said), said
