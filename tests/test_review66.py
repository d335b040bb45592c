"""Review round 66: what the session's merged pieces (round 58's JIT counts, read lists,
toolchain drift, the card's state after failures, one card per node name) do on a real node."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from orchestrator.classify import Evidence
from orchestrator.errors import InfraError
from orchestrator.run import gpu_state, probe
from orchestrator.run.stages.base import CellStages
from orchestrator.transport.base import CommandResult

UUID = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


class LocalShell:
    """Runs a command in sh with a stand-in nvidia-smi first on PATH; a command that outlasts
    `timeout` raises, as a node's transport does (CommandTimeout is an InfraError)."""

    def __init__(self, bin_dir: Path, scale: float) -> None:
        self.bin_dir, self.scale, self.timeouts = bin_dir, scale, []

    def run(self, command: str, timeout: float) -> CommandResult:
        self.timeouts.append(timeout)
        env = {"PATH": f"{self.bin_dir}:/usr/bin:/bin"}
        clock = time.monotonic()
        try:
            done = subprocess.run(
                ["sh", "-c", command], capture_output=True, text=True, env=env, timeout=timeout * self.scale
            )
        except subprocess.TimeoutExpired as err:
            raise InfraError(f"command still running after {timeout:.0f} s") from err
        return CommandResult(command, done.returncode, done.stdout, done.stderr, time.monotonic() - clock)


def test_a_card_whose_nvidia_smi_hangs_after_a_failed_run_is_lost_not_the_kernels(tmp_path: Path, monkeypatch) -> None:
    """A card that fell off the bus mid-run hangs nvidia-smi: the look after the failed run had its
    row query end at the tool's bound (rc 124: the card is lost), then asked the card's state and
    every card's processes, each hanging as long, past the look's own 60 s; the transport's
    timeout made the whole look say nothing, and the kernel was judged `fail` on a lost card.
    Here the tool's bound is scaled down (2 s for 50) and so is the transport's clock."""
    scale = 2 / getattr(probe, "TOOL_SECONDS", 50)
    monkeypatch.setattr(probe, "TOOL", "timeout -k 1 2")
    log = tmp_path / "calls"
    (tmp_path / "nvidia-smi").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec sleep 30\n')
    (tmp_path / "nvidia-smi").chmod(0o755)
    shell = LocalShell(tmp_path, scale)
    stages = object.__new__(CellStages)
    gpu = SimpleNamespace(uuid=UUID, label=f"GPU 0 ({UUID})")
    ev = Evidence()
    ev.run_exit = 1
    stages.snapshot = SimpleNamespace(workdir=str(tmp_path / "work"))
    stages.result = SimpleNamespace(gpu=gpu, evidence=ev)
    stages._sanitize_gpu = None
    stages.t = shell
    _, lost, unfit = stages._node_trouble()
    # said as hung, not as a card nvidia-smi "no longer lists" (red-team round 116)
    assert "nvidia-smi did not answer about" in lost and "hung driver or card" in lost, (lost, log.read_text())
    assert unfit == ""
    # the card's row query alone: nothing more is asked of a card that did not answer
    assert log.read_text().count("--query") == 1, log.read_text()
    # and where each query answers at its bound, the look's own timeout outlasts them all
    bound = getattr(probe, "TOOL_SECONDS", 50) + getattr(probe, "TOOL_GRACE", 5)
    assert shell.timeouts[0] > (1 + getattr(gpu_state, "STATE_CALLS", 2)) * bound


def test_the_shells_toolchain_check_reads_a_compiler_in_a_folder_with_a_space_as_python_does(tmp_path: Path) -> None:
    """The build's check that the toolchain is still the probe's, in the shell scripts (nodes without
    python3, Slurm), stat'ed every compiler it found in one unquoted `stat $tc`: a gcc in a folder
    whose name holds a space ("/opt/gnu tools/bin", a WSL node's "/mnt/c/Program Files/...") was two
    words, neither a file, and every build of the node was infra-error ("the toolchain ... changed
    on the node since its probe") though nothing changed; the python runner's check (node/drift.py)
    read the same node as unchanged."""
    from orchestrator.run import noderunner
    from orchestrator.run.stages.build_tools import toolchain_script

    drifted, file_identity = noderunner.drifted, noderunner.file_identity

    folder = tmp_path / "gnu tools" / "bin"
    folder.mkdir(parents=True)
    (folder / "gcc").write_text("#!/bin/sh\nexit 0\n")
    (folder / "gcc").chmod(0o755)
    path = f"{folder}:/usr/bin:/bin"
    checks = {
        "files": [["gcc", "gcc", file_identity(str(folder / "gcc"))], ["nvcc-x", "nvcc-x", ""]],
        "env": [["CPATH", None]],
    }
    assert drifted(checks, {"PATH": path}) == []  # the python runner: unchanged
    script = f'bad=; {toolchain_script(checks)}echo "bad=$bad"'
    said = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env={"PATH": path}, check=False)
    assert "toolchain-changed" not in said.stdout and "bad=\n" in said.stdout, said.stdout
    # and a compiler replaced there is still seen
    (folder / "gcc").unlink()
    (folder / "gcc").write_text("#!/bin/sh\nexit 10\n")  # another size: the same second, maybe inode
    (folder / "gcc").chmod(0o755)
    said = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env={"PATH": path}, check=False)
    assert "@@farm toolchain-changed compilers" in said.stdout, said.stdout
