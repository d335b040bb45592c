"""Leftovers of red-team rounds 157/158 in the node's runner and the farm side that reads it.

1. A sanitizer tool's seconds, and each stage's, were the wall clock's: a clock stepped back (NTP)
   made a tool killed at its timeout read as unfinished, stepped forward made one killed early read
   as timed out. Now the monotonic clock's, as the run stage's kernel seconds already were.
2. The sanitize stage (after a passing run) did not read the NVIDIA kernel module again: a module
   reloaded between the run and the sanitizer runs left the pass certified under the probe's driver.
3. Once a reload is seen on a node, its remaining cells are not run (each infra-error, saying why).
4. A dead placer's `.part.PID` folder was judged old by this node's clock against the file server's
   mtime (`find -mmin +60`): a node hours ahead of an NFS server swept another machine's folder as it
   was being written. Now judged against a folder made just then on the same file system.

In-process, the runner's functions run in its own namespace (noderunner) with a patched wall clock;
end to end, the nodes are real OpenSSH sshd on loopback (tests/nodes.py).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from nodes import SshNode, standin_job, standin_variant
from test_redteam157 import PROBED, RELOADED, T4, _node
from test_verdicts import MIN75, rows, run

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.run import bundle, noderunner, staging
from orchestrator.run.bundle import Bundle
from orchestrator.transport import transport_for

HOUR_NS = 3600 * 10**9


def _stepped_clock(monkeypatch: pytest.MonkeyPatch, step_ns: int) -> None:
    """The wall clock moved by STEP_NS after its first read (NTP stepping it mid-stage)."""
    real = time.time_ns
    reads = [0]

    def stepped() -> int:
        reads[0] += 1
        return real() + (step_ns if reads[0] > 1 else 0)

    monkeypatch.setattr(time, "time_ns", stepped)


def _sanitize_in_process(tmp_path: Path, command: str, limit: int) -> str:
    """The python runner's sanitize stage over one tool running COMMAND; its control text."""
    san = tmp_path / "compute-sanitizer"
    san.write_text("#!/bin/sh\nexit 0\n")
    san.chmod(0o755)
    run_dir = tmp_path / "run"
    (run_dir / "work").mkdir(parents=True)
    private = run_dir / "bin" / "kernel"
    private.parent.mkdir()
    private.write_bytes(b"kernel")
    spec = {
        "configured": str(san),
        "nvcc": "nvcc",
        "workdir": str(tmp_path / "workdir"),
        "lock": None,
        "wait": 0,
        "run_dir": str(run_dir),
        "limit": limit,
        "tmp": str(run_dir / "tmp"),
        "gpu": None,
        "tools": [["memcheck", command, str(run_dir / "sanitize-memcheck.log")]],
        "copy_from": None,
        "private": str(private),
        "expected": noderunner.sha_of(str(private)),
    }
    out = noderunner.Stage()
    noderunner.sanitize(out, spec, dict(os.environ), {"cell": "rt159-no-such-cell", "subreaper": False})
    return out.framed().decode()


def _tool_seconds(text: str) -> tuple[int, float]:
    [line] = [line for line in text.splitlines() if line.startswith("@@farm tool memcheck ")]
    code, started, ended = (int(word) for word in line.split()[3:6])
    return code, (ended - started) / 1e9


def test_a_tool_killed_at_its_timeout_under_a_clock_stepped_back_reads_its_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool is killed at its 1 s limit while the wall clock steps back an hour: the seconds the
    farm judges a timeout by (stages/sanitize.py: at least 98% of the limit) were -3599 at 1cc46a6."""
    _stepped_clock(monkeypatch, -HOUR_NS)
    code, seconds = _tool_seconds(_sanitize_in_process(tmp_path, "sleep 30", 1))
    assert code in (124, 137) and 0.98 <= seconds < 20, (code, seconds)


def test_a_tool_killed_at_once_under_a_clock_stepped_forward_is_no_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed by a signal at once (exit 137, the OOM killer's), the wall clock stepped forward an hour:
    read 3600 s, a timeout, at 1cc46a6."""
    _stepped_clock(monkeypatch, HOUR_NS)
    code, seconds = _tool_seconds(_sanitize_in_process(tmp_path, "kill -9 $$", 100))
    assert code == 137 and 0 <= seconds < 20, (code, seconds)


def test_a_stages_seconds_are_the_monotonic_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's `@@farm section` and `section-end` marks, read by the farm as the stage's start and
    seconds (trips.py): with the wall clock stepped back mid-stage, its end came before its start."""
    _stepped_clock(monkeypatch, -HOUR_NS)
    got = io.BytesIO()
    monkeypatch.setattr(noderunner, "OUT", got)
    spec = {"configured": "/no/such/compute-sanitizer", "nvcc": "nvcc", "workdir": "/no/such/workdir"}
    stage = {"stage": "sanitize", "spec": spec, "files": [], "timeout": 60}
    plan = {"token": "t" * 32, "marker": {"FARM_CELL": "rt159-no-such-cell"}, "together": True, "stages": [stage]}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        noderunner.run_plan(plan)
    finally:  # run_plan blocks SIGCHLD, as its own process needs: never the test process's (conftest)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    marks = {
        words[1]: int(words[3])
        for words in (line.split() for line in got.getvalue().decode().splitlines())
        if words[:1] == ["@@farm"] and len(words) == 4 and words[1] in ("section", "section-end")
    }
    assert 0 <= marks["section-end"] - marks["section"] < 20 * 10**9, marks


def test_the_sanitize_stage_reads_the_loaded_module_after_its_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: the module's line once the tools and their leftovers are gone (no module here)."""
    text = _sanitize_in_process(tmp_path, "true", 10)
    lines = text.splitlines()
    assert "@@farm driver " in lines, text
    tools = [i for i, line in enumerate(lines) if line.startswith("@@farm tool ")]
    assert tools and lines.index("@@farm driver ") > max(tools), text


def _reload_when_sanitized(tmp_path: Path) -> Path:
    """A prelude that reloads the module (rewrites its version line) only under the sanitizer stand-in,
    which runs the kernel with STANDIN_SANITIZER_TOOL set: the run saw the probe's module."""
    prelude = tmp_path / "reload.sh"
    prelude.write_text(
        f"[ -n \"${{STANDIN_SANITIZER_TOOL-}}\" ] && printf '%s\\n' '{RELOADED}' > /proc/driver/nvidia/version; :\n"
    )
    return prelude


def test_a_module_reloaded_before_the_sanitizer_runs_certifies_nothing(make_farm, tmp_path: Path, runner: str) -> None:
    """The kernel passes on the probe's module 550.54.15 and is clean under memcheck, but the module was
    reloaded as 535.104.05 before the sanitizer ran: a pass at 1cc46a6. Now the node's infra-error,
    naming both, with every runner."""
    from nodes import install_sanitizer

    node = _node(tmp_path / "node", PROBED)
    install_sanitizer(node)
    node.start()
    try:
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=_reload_when_sanitized(tmp_path))
        variant["sanitize"] = ["memcheck"]
        entry = node.farm_entry(tmp_path / "work")
        config = make_farm(tmp_path / "farm", {"reloads": entry}, [standin_job("standin", {"v": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    [row] = rows(tmp_path / "farm" / "results.db", summary.run_id).values()
    assert row["outcome"] == "infra-error", row["reason"]
    assert "535.104.05" in row["reason"] and T4.driver in row["reason"] and "sanitiz" in row["reason"], row["reason"]


def test_a_node_whose_module_reloaded_runs_no_more_cells(make_farm, tmp_path: Path) -> None:
    """The first cell's kernel reloads the module; the node's later cell is not run at all (it ran, and
    was each its own infra-error, at 1cc46a6), infra-error saying why."""
    prelude = tmp_path / "reload.sh"
    prelude.write_text(f"printf '%s\\n' '{RELOADED}' > /proc/driver/nvidia/version\n")
    node = _node(tmp_path / "node", PROBED)
    node.start()
    try:
        variants = {
            "a_reloads": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude),
            "b_after": standin_variant("PASS", MIN75, "MIN_CC=75"),
        }
        entry = dict(node.farm_entry(tmp_path / "work"), build_jobs=1)  # one cell at a time, in order
        config = make_farm(tmp_path / "farm", {"reloads": entry}, [standin_job("standin", variants)], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    got = rows(tmp_path / "farm" / "results.db", summary.run_id)
    first, after = (next(r for key, r in got.items() if name in str(key)) for name in ("a_reloads", "b_after"))
    assert first["outcome"] == after["outcome"] == "infra-error", (first["reason"], after["reason"])
    assert "535.104.05" in after["reason"] and "not run" in after["reason"], after["reason"]


# 4. leftovers of dead placers, judged by the file server's clock -----------------------------------


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_the_runner_keeps_a_fresh_leftover_on_a_node_whose_clock_is_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This node's clock 10 h ahead of the file server's: a dead pid's (another machine's) folder the
    server stamped just now read as 10 h old, and was swept while being written. One the server stamped
    two hours ago is still swept."""
    final = tmp_path / "bundles" / "digest"
    final.parent.mkdir()
    fresh, old = Path(f"{final}.part.{_dead_pid()}"), Path(f"{final}.old.{_dead_pid()}")
    for folder in (fresh, old):
        folder.mkdir()
        (folder / "half").write_text("being written")
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 10 * 3600)
    digest = "0" * 64  # the placing fails (no such digest): the sweep is what is judged
    assert noderunner.place_one({"digest": digest, "files": [], "name": "b"}, str(final)) is not None
    assert fresh.is_dir() and (fresh / "half").exists()
    assert not old.exists()


def test_the_script_keeps_a_fresh_leftover_on_a_node_whose_clock_is_ahead(tmp_path: Path) -> None:
    """The shell half (staging.py's extracting script), through a real sshd node whose `find` judges by a
    clock 10 h ahead of the file server (a stand-in: every folder reads as older than -mmin asks)."""
    node = SshNode("ahead", tmp_path / "node", T4)
    node.prepare()
    ahead = node.node_bin / "find"
    ahead.write_text(
        "#!/bin/sh\n# a clock 10 h ahead: every path reads as hours old\n"
        'case " $* " in *" -mmin "*) printf \'%s\\n\' "$1"; exit 0;; esac\n'
        'exec /usr/bin/find "$@"\n'
    )
    ahead.chmod(0o755)
    (tmp_path / "a.cu").write_text("// one\n")
    sources = Bundle.of_files("sources of k", {"a.cu": tmp_path / "a.cu"})
    work = tmp_path / "work"
    (work / "incoming").mkdir(parents=True)
    final = bundle.remote_dir(str(work), sources)
    Path(final).parent.mkdir(parents=True, exist_ok=True)
    fresh, old = Path(f"{final}.part.{_dead_pid()}"), Path(f"{final}.old.{_dead_pid()}")
    for folder in (fresh, old):
        folder.mkdir()
        (folder / "half").write_text("being written")
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    node.start()
    try:
        with transport_for("ahead", NodeSpec(**node.farm_entry(work))) as transport:
            staging.ship(transport, str(work), [(sources, "")], tmp_path / "cache")
            assert staging.node_digest(transport, final) == sources.digest
    finally:
        node.stop()
    assert fresh.is_dir() and (fresh / "half").exists()
    assert not old.exists()
    assert not [p for p in Path(final).parent.iterdir() if p.name != Path(final).name and p != fresh]
