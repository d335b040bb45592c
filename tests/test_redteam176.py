"""Red-team round 176: three leftovers of earlier rounds.

Broke (before -> after):

1. A kernel header's `Run:` line with a shell operator glued to the program (`// Run: ./k;`,
   `// Run: ./k&&./k 2`, `// Run: ./k|tee x`, `// Run: ./k>log`) was read as prose: the
   variant ran `{binary}` without a word, not what the author wrote. One with the operator
   among the arguments (`./k 4096;echo hi`, `./k &&`) was refused, but as "expected arguments
   of plain words", which did not say why. The run goes to the node's shell as the variant's one
   command (run/commands.py kernel_run), so a `;` stripped here would be a guess at what the
   author meant: every such line is now refused at load, naming the file, the line and "a single
   `./PROGRAM ARGS` command, no shell operators", as round 172 refuses `;` in a Build line.
2. Slurm's suspension was end - start - elapsed of squeue's/sacct's local wall-clock times
   without a zone: across a daylight-saving change the repeated (autumn) or skipped (spring)
   hour read as an hour suspended, or made a suspension vanish. Now the local times are
   read in the zone (a fold-aware span), see the tests below.
3. Progress lines dropped while stdout was not read (round 171's bounded queue) left a gap in
   the log without a word. Now the writer says how many were dropped once the stream drains.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_header_jobs import farm_dir, kernel, refused

from orchestrator.config.farm import load_farm

BUILD = "// Build: nvcc -arch=sm_80 -o k k.cu\n"


@pytest.mark.parametrize(
    "run",
    ["./k;", "./k&&./k 2", "./k|tee x", "./k>log", "./k 4096;echo hi", "./k 4096;", "./k &&", "./k 4096 ; echo"],
)
def test_a_run_line_with_a_shell_operator_is_refused_naming_line_and_form(tmp_path: Path, run: str) -> None:
    """Before: `./k;`, `./k&&...`, `./k|tee`, `./k>log` loaded with the variant running `{binary}`
    (the line read as prose); the others said "expected arguments of plain words". Figure: a
    ConfigError on kernels/k.cu, line 2's Run, expecting a single `./PROGRAM ARGS` command."""
    err = refused(farm_dir(tmp_path, {"k.cu": kernel(BUILD + f"// Run: {run}\n")}))
    assert err.file == str(tmp_path / "kernels" / "k.cu")
    assert err.key == "line 2, Run", err
    assert "single `./PROGRAM ARGS` command" in err.expected and "no shell operators" in err.expected, err


def test_a_plain_run_line_and_prose_still_load(tmp_path: Path) -> None:
    """The refusal is for a line that runs a built program: `./k 4096` is its run, and a
    `Run:` of a program no Build line makes (`./other;`) is still prose."""
    lines = BUILD + "// Run: ./k 4096\n// Run: ./other; see the notes\n"
    job = load_farm(farm_dir(tmp_path, {"k.cu": kernel(lines)})).jobs["k"]
    assert {v.run for v in job.spec.variants.values()} == {"{binary} 4096"}
