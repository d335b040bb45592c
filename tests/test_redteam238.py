"""Red-team round 238: run commands that start the kernel under a launcher.

Broke (before/after):
1. A launcher's own lines were read for the kernel's markers. compute-sanitizer prints its banner and
   `========= ERROR SUMMARY: 0 errors` on stdout (the real tool's default, without --log-file), ncu
   its `==PROF== Profiling "k" - 0: 0%....100% - 9 passes`: a kernel whose own check printed
   "verify: 3 errors" (pass marker `0 errors`), or "verify: FAIL" (pass marker `(?i)pass`), and exited
   0 passed. Now the lines those launchers mark as theirs (`=========`, `==PROF==`, `==PID==`) are
   read for no marker.
2. A launcher on the node's PATH that could not start itself (an `mpirun` whose runtime library is
   gone: the dynamic loader's "error while loading shared libraries", exit 127) never started the
   kernel, and the cell was the kernel's `fail` ("its launcher ended before it ran"). A kernel command
   that exits 126 or 127 without the kernel's copy ever read is the node's infra-error now.

The stand-in launchers are shell scripts and a real ELF: they print the real tools' documented lines
and exit as they do (compute-sanitizer: the program's own code where it found nothing; the loader:
127). They lie outside /tmp (a launcher where the run could write is not run): under HOME.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes import CARDS, SshNode, running_node, standin_job
from test_verdicts import EXACT90, MIN75, rows, run

from orchestrator.classify import Evidence, classify
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.streams import StreamScan, scan_bytes

# compute-sanitizer as the real one prints on stdout around a program it found nothing in: its exit is the program's
SANITIZER = """#!/bin/sh
echo "========= COMPUTE-SANITIZER"
"$@"; rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
"""
# ncu where it profiles a kernel: its own lines, each marked ==PROF==, and the program's exit
NCU = """#!/bin/sh
echo "==PROF== Connected to process $$ ($1)"
"$@"; rc=$?
echo '==PROF== Profiling "axpy" - 0: 0%....50%....100% - 9 passes'
echo "==PROF== Disconnected from process $$"
exit $rc
"""


def script_variant(body: str, run_text: str, cc: dict[str, str] = MIN75) -> dict[str, object]:
    """A "kernel" the build writes as a script that prints BODY's words and exits 0."""
    build = f"test -f {{sources}} && printf '#!/bin/sh\\n{body}\\n' > {{binary}} && chmod +x {{binary}}"
    return {"build": build, "inspect": "test -x {binary}", "cc": cc, "run": run_text}


@pytest.fixture
def tool_node(request: pytest.FixtureRequest) -> Iterator[SshNode]:
    """A T4 node whose PATH's first folder (its launchers' stand-ins) lies outside /tmp."""
    root = Path(tempfile.mkdtemp(prefix="farm-rt238-", dir=Path.home()))
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    yield from running_node("t4", root / "node", CARDS["t4"])


def _tool(node: SshNode, name: str, text: str) -> None:
    path = node.node_bin / name
    path.write_text(text)
    path.chmod(0o755)


def _without_its_library(node: SshNode, name: str) -> None:
    """A real ELF launcher linked against a library that is then removed: the loader's exit 127."""
    lib = node.root / "lib"
    lib.mkdir()
    (lib / "r.c").write_text("int farm_rte(void) { return 0; }\n")
    (lib / "m.c").write_text("int farm_rte(void);\nint main(void) { return farm_rte(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "libfarmrte.so", "r.c"], cwd=lib, check=True)
    link = ["gcc", "-o", str(node.node_bin / name), "m.c", "-L.", "-lfarmrte", f"-Wl,-rpath,{lib}"]
    subprocess.run(link, cwd=lib, check=True)
    (lib / "libfarmrte.so").unlink()


def _cells(node: SshNode, make_farm, tmp_path: Path, variants: dict, **job: object) -> dict:
    nodes = {"t4": node.farm_entry(tmp_path / "work-t4")}
    _, summary = run(make_farm(tmp_path, nodes, [standin_job("standin", variants, **job)]))
    return rows(tmp_path / "results.db", summary.run_id)


@pytest.mark.parametrize(
    ("tool", "text", "says", "marker"),
    [
        ("compute-sanitizer", SANITIZER, "verify: 3 errors", r"\b0 errors\b"),
        ("ncu", NCU, "verify: FAIL", r"(?i)pass"),
    ],
)
def test_a_launchers_own_line_is_no_pass_marker(
    tool_node: SshNode, make_farm, tmp_path: Path, tool: str, text: str, says: str, marker: str
) -> None:
    """Before: pass ("exit 0 and the pass marker on stdout (line 3)"), the launcher's own summary line
    matched. Figure: fail, exit 0 but no pass marker: the kernel never printed it."""
    _tool(tool_node, tool, text)
    variants = {"under": script_variant(f"echo {says}", f"{tool} {{binary}}")}
    row = _cells(tool_node, make_farm, tmp_path, variants, pass_marker=marker)[("under", "Tesla T4")]
    assert row["outcome"] == "fail", row["reason"]
    assert "no pass marker" in row["reason"], row["reason"]


def test_a_kernels_own_marker_under_such_a_launcher_still_passes(tool_node: SshNode, make_farm, tmp_path: Path) -> None:
    """The kernel's own line is read as before, beside the tool's. Figure: pass."""
    _tool(tool_node, "compute-sanitizer", SANITIZER)
    variants = {"under": script_variant("echo verify: 0 errors", "compute-sanitizer {binary}")}
    row = _cells(tool_node, make_farm, tmp_path, variants, pass_marker=r"\b0 errors\b")[("under", "Tesla T4")]
    assert row["outcome"] == "pass", row["reason"]


def test_only_the_launchers_lines_are_skipped_and_cuda_errors_still_count() -> None:
    """streams: the skip is the run's launchers' alone; CUDA's error words count on any line."""
    from orchestrator.config.kernel_calls import launcher_lines

    assert launcher_lines("{binary}") == "" and launcher_lines("timeout 5 {binary}") == ""
    own = launcher_lines("compute-sanitizer --tool memcheck {binary}")
    out = b"========= ERROR SUMMARY: 0 errors\n========= Program hit cudaErrorNoDevice\nk: 0 errors\n"
    seen = scan_bytes(out, {"pass": r"0 errors", "cuda": r"cudaError\w+"}, anywhere=frozenset({"cuda"}))
    assert seen.matches == {"pass": 1, "cuda": 2}
    scanner = StreamScan({"pass": r"0 errors", "cuda": r"cudaError\w+"}, 1 << 20, frozenset({"cuda"}), own)  # type: ignore[call-arg]
    scanner.feed(out)
    assert scanner.finish().matches == {"pass": 3, "cuda": 2}
    assert launcher_lines("mpirun -np 2 valgrind {binary}") == r"^(?:==\d+==|--\d+--|\*\*\d+\*\*)"


def test_a_launcher_that_cannot_load_its_libraries_is_the_nodes(tool_node: SshNode, make_farm, tmp_path: Path) -> None:
    """Before: fail, "the kernel's binary was never read: its launcher ended before it ran (exit
    127)". Figure: infra-error, quoting the loader's line; on a card the kernel must refuse too."""
    _without_its_library(tool_node, "mpirun")
    variants = {
        "serves": script_variant("echo standin: PASS", "mpirun -np 1 {binary}"),
        "refuses": script_variant("echo standin: PASS", "mpirun -np 1 {binary}", cc=EXACT90),
    }
    got = _cells(tool_node, make_farm, tmp_path, variants)
    for name in variants:
        row = got[(name, "Tesla T4")]
        assert row["outcome"] == "infra-error", row["reason"]
        assert "error while loading shared libraries" in row["reason"], row["reason"]


def test_a_kernel_that_ran_beside_a_broken_launcher_on_a_card_it_must_refuse_is_no_refusal() -> None:
    """classify: the kernel exited 0 in one command (it ran there), another's launcher could not
    start: a missing refusal whatever the node's trouble; on a card it serves, the node's."""
    seen = {"build_exit": 0, "inspect_exit": 0, "run_exit": 127, "kernel_started": True, "kernel_exit": 127}
    ev = Evidence(**seen, kernel_unread=True, kernel_exited_0=True)
    refuse = Expectation(Outcome.EXPECTED_REFUSAL, "CC 7.5 is outside CC == 9.0")
    assert classify(ev, refuse).outcome is Outcome.MISSING_REFUSAL
    assert classify(ev, Expectation(Outcome.PASS, "")).outcome is Outcome.INFRA_ERROR
    failed = Evidence(**{**seen, "run_exit": 1, "kernel_exit": 1}, kernel_unread=True)
    assert classify(failed, Expectation(Outcome.PASS, "")).outcome is Outcome.FAIL  # taskset -c 4095: the run's
