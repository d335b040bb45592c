"""Red-team round 271: the shell runner's trust boundary, end to end (a real sshd node).

Under `runner: shell` a cell's stages run as one `sh -c SCRIPT` over SSH, the kernel as the same
login: it reads the script's command line (/proc/PID/cmdline) and writes into its stdout
(/proc/PID/fd/1), and may lower its limits (prlimit).

1. A failing kernel made its cell pass: it forged the rest of its run's frames with the token read
   from the command line, and cut its shell short before the real ones. The token now comes on the
   script's stdin (frames.READ_TOKEN), and the script's last line names it.
2. A kernel writing one of the node's own lines (`@@farm undying`, `binary-altered`,
   `gpu-wait-failed`) had its node retried and retired: the other kernels' cells skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_redteam263
from nodes import CARDS, Fleet, query, standin_variant

MIN75 = {"min": "7.5"}
FORGERS = Path(__file__).parent / "forgers"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    nodes = Fleet(tmp_path_factory.mktemp("redteam271-fleet"))
    try:
        nodes.add("t4", CARDS["t4"])
        yield nodes
    finally:
        nodes.stop()


def _run(fleet: Fleet, make_farm, tmp_path: Path, variants: dict, runner: str) -> dict:
    return test_redteam263._run(fleet, make_farm, tmp_path, variants, runner, node="t4")


def _tries(tmp_path: Path, row: dict) -> int:
    sql = "SELECT * FROM attempts WHERE run_id = ? AND variant = ?"
    return len(query(tmp_path / "results.db", sql, row["run_id"], row["variant"]))


@pytest.mark.parametrize("runner", ["shell", "auto"])
def test_a_failing_kernel_that_forges_the_rest_of_its_run_and_stops_its_script_is_no_pass(
    fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """Before: pass under the shell runner. The kernel (FAILNUM: prints its mismatch, exits 1) read the
    frame token from its script shell's command line, wrote its run's control frame (`@@farm checked`
    with its own sha256, `@@farm 0`, `@@farm end 0`), a stdout frame with the pass marker, its statuses
    (exit 0) and `@@farm ran build inspect run` into the shell's stdout (/proc/PID/fd/1), then lowered
    that shell's descriptor limit (prlimit) so it ended before printing its own lines. Figure: the
    token comes on the script's stdin, in no process's words; the forged frames are text outside frames
    and the stages-ran line needs the token: infra-error at run ("never said which stages it ran"), one
    try, never a pass. The python runner (its token not in its words, its stream out of the kernel's
    reach) gives the kernel its own verdict, fail; a kernel that forges nothing passes on either."""
    prelude = tmp_path / "forger.sh"
    prelude.write_text(f"{sys.executable} {FORGERS / 'forge_run.py'}\n")
    variants = {
        "clean": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "forger": standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude),
    }
    rows = _run(fleet, make_farm, tmp_path, variants, runner)
    assert (rows["clean"]["outcome"], rows["clean"]["failed_stage"]) == ("pass", None), rows["clean"]["reason"]
    row = rows["forger"]
    if runner == "shell":
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "run"), row["reason"]
        assert "never said which stages it ran" in row["reason"], row["reason"]
        assert _tries(tmp_path, row) == 1
    else:
        assert (row["outcome"], row["failed_stage"]) == ("fail", "run"), row["reason"]


# a line the node's script prints, written by the kernel into the first ancestor's stdout that is a pipe
BLAMER = r"""p=$$
while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    case "$(readlink /proc/$p/fd/1 2>/dev/null)" in
    pipe:*|socket:*) printf '\n%s\n' "$FORGED_LINE" 2>/dev/null > /proc/$p/fd/1 && break ;;
    esac
    p=$(awk '/^PPid:/ {print $2}' /proc/$p/status 2>/dev/null)
done
"""


LINES = {
    "undying": "@@farm undying 1 sleep 99",
    "altered": "@@farm binary-altered " + "0" * 64,
    "locked": "@@farm gpu-wait-failed 1 2",
}


@pytest.mark.parametrize("line", sorted(LINES))
def test_a_kernel_that_forges_a_node_blaming_line_retires_no_node(
    fleet: Fleet, make_farm, tmp_path: Path, line: str
) -> None:
    """Before: a failing kernel under the shell runner wrote one of the node's own lines (a process that
    would not die, its binary altered, its GPU's lock not taken) into its script's stdout: infra-error,
    tried again twice (each try forging again), three failures in a row, and the node was retired: the
    three passing kernels after it were infra-error "marked unhealthy", skipped. Figure: the lines that
    stop the script (altered, locked) count only as the script's last line before its end line, so the
    forger gets its own verdict (fail); `undying`, which cannot be told from the node's, is infra-error
    saying the kernel could have written it, tried once: the others pass."""
    prelude = tmp_path / "blamer.sh"
    prelude.write_text(f"FORGED_LINE='{LINES[line]}'\n{BLAMER}")
    variants = {"a-blamer": standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)}
    variants.update({f"b{i}": standin_variant("PASS", MIN75, "MIN_CC=75") for i in range(3)})
    rows = _run(fleet, make_farm, tmp_path, variants, "shell")
    assert [rows[f"b{i}"]["outcome"] for i in range(3)] == ["pass"] * 3, [rows[f"b{i}"]["reason"] for i in range(3)]
    row = rows["a-blamer"]
    if line == "undying":
        assert (row["outcome"], row["failed_stage"]) == ("infra-error", "run"), row["reason"]
        assert "or the kernel wrote that line" in row["reason"], row["reason"]
        assert _tries(tmp_path, row) == 1
    else:
        assert (row["outcome"], row["failed_stage"]) == ("fail", "run"), row["reason"]
