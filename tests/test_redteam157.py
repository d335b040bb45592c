"""Red-team round 157: a node's NVIDIA kernel module reloaded with another version under a passing cell.

The farm probes each node once, at the run's start, and stores every cell under the driver it found
then. A cell that fails has its card asked after its run (round 147), but a pass is never asked after:
a module reloaded mid-run (an unattended upgrade, an admin) left passes certified under a driver the
kernel never ran on. The node's runner now reads the loaded module's version line
(/proc/driver/nvidia/version) right after each kernel's run, and the farm compares it with the probe's.

End to end, the nodes are real OpenSSH sshd on loopback, in a mount namespace of their own whose
/proc/driver is a tmpfs holding the version file (this machine has no NVIDIA driver); the stand-in
kernel's prelude rewrites that file as a module reload would.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nodes import CARDS, SshNode, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

from orchestrator.classify import Evidence, classify
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run import noderunner
from orchestrator.run.driver_check import module_changed

T4 = dataclasses.replace(CARDS["t4"], salt="rt157")  # a card of its own UUID
PROBED = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {T4.driver}  Tue Mar  5 22:23:56 UTC 2024"
RELOADED = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
EVIDENCE = f"{PROBED}\n/dev/nvidiactl"


def test_the_runner_reads_the_loaded_modules_first_line(tmp_path: Path) -> None:
    """The node's read, in-process in the runner's own namespace (the text the node runs), on a file of
    the test's (the path is the function's argument, which nothing the farm sends can set): its first
    line, and nothing where there is no file."""
    version = tmp_path / "version"
    version.write_text(f"{RELOADED}\nGCC version:  gcc version 12.3.0\n")
    out = noderunner.Stage()
    noderunner.say_driver(out, str(version))
    assert out.framed() == f"@@farm driver {RELOADED}\n".encode()
    gone = noderunner.Stage()
    noderunner.say_driver(gone, str(tmp_path / "none"))
    assert gone.framed() == b"@@farm driver \n"


def test_another_module_version_after_the_run_is_named_with_the_probes() -> None:
    said = module_changed(EVIDENCE, RELOADED)
    assert "535.104.05" in said and T4.driver in said, said
    assert module_changed(EVIDENCE, PROBED) == ""  # the same module
    assert module_changed(EVIDENCE, "  " + PROBED.replace("  ", " ") + "\n") == ""  # spacing is not a version
    assert "no NVIDIA kernel module" in module_changed(EVIDENCE, "")  # unloaded since the probe
    assert module_changed(EVIDENCE, None) == ""  # the node said nothing of it: nothing compared
    assert module_changed("", RELOADED) == ""  # no module at the probe (a stand-in node): nothing compared
    assert module_changed("/dev/nvidiactl", RELOADED) == ""


def _verdict(reloaded: str, run_exit: int, pass_line: int | None) -> tuple[Outcome, str]:
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=run_exit, pass_line=pass_line, kernel_started=True)
    ev.kernel_exit = run_exit
    ev.driver_reloaded = reloaded
    verdict = classify(ev, Expectation(Outcome.PASS, "CC 7.5 is served"))
    return verdict.outcome, verdict.reason


def test_a_pass_or_a_fail_under_a_reloaded_module_is_the_nodes() -> None:
    words = module_changed(EVIDENCE, RELOADED)
    outcome, reason = _verdict(words, 0, 3)
    assert outcome is Outcome.INFRA_ERROR and words in reason and "pass" in reason, reason
    outcome, reason = _verdict(words, 1, None)  # nor is its failure the kernel's
    assert outcome is Outcome.INFRA_ERROR and words in reason, reason
    assert _verdict("", 0, 3)[0] is Outcome.PASS  # guard: the same module, the same pass


def _node(root: Path, version: str | None) -> SshNode:
    """A T4 stand-in node; with VERSION, its sshd in a mount namespace whose /proc/driver/nvidia/version
    holds it, as a loaded NVIDIA module's does."""
    node = SshNode("reloads", root, T4)
    node.prepare()
    if version is not None:
        mount = (
            "mount -t tmpfs farm-nvidia /proc/driver && mkdir /proc/driver/nvidia && "
            f"printf '%s\\n' '{version}' > /proc/driver/nvidia/version && exec \"$@\""
        )
        node.prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh"]
    return node


def _one_pass(make_farm, tmp_path: Path, node: SshNode, prelude: Path | None = None) -> tuple[str, str]:
    node.start()
    try:
        entry = node.farm_entry(tmp_path / "work")
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
        config = make_farm(tmp_path / "farm", {"reloads": entry}, [standin_job("standin", {"v": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    [row] = rows(tmp_path / "farm" / "results.db", summary.run_id).values()
    return row["outcome"], row["reason"] or ""


def test_a_pass_under_a_module_reloaded_mid_run_certifies_nothing(make_farm, tmp_path: Path, runner: str) -> None:
    """The probe reads the module 550.54.15; while the kernel runs, the module is reloaded as 535.104.05
    (the prelude rewrites the version file, as the reload does), and the kernel passes. Stored as a
    pass under 550.54.15 at 0f1e6ec: a certificate for a driver the kernel never ran on. Now the
    node's infra-error, naming both versions, with every runner (resident, per cell, shell)."""
    prelude = tmp_path / "reload.sh"
    prelude.write_text(f"printf '%s\\n' '{RELOADED}' > /proc/driver/nvidia/version\n")
    outcome, reason = _one_pass(make_farm, tmp_path, _node(tmp_path / "node", PROBED), prelude)
    assert outcome == "infra-error", reason
    assert "535.104.05" in reason and T4.driver in reason, reason


def test_a_pass_under_the_probed_module_stays_a_pass(make_farm, tmp_path: Path) -> None:
    """Guard: the module the probe read, unchanged after the run: the pass is the kernel's."""
    outcome, reason = _one_pass(make_farm, tmp_path, _node(tmp_path / "node", PROBED))
    assert outcome == "pass", reason


def test_a_pass_on_a_node_without_the_module_file_stays_a_pass(make_farm, tmp_path: Path, runner: str) -> None:
    """Guard: no /proc/driver/nvidia/version at the probe nor after (a stand-in node, a node without
    the kernel driver): nothing to compare, the pass stands, with every runner."""
    outcome, reason = _one_pass(make_farm, tmp_path, _node(tmp_path / "node", None))
    assert outcome == "pass", reason
