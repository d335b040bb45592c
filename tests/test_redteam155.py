"""Red-team round 147's leftovers (round 155): how the farm reads a card after a kernel's run.

An uncorrectable ECC count is nvidia-smi's since the driver loaded: a card with old errors made
every failing kernel on it the node's infra-error for the rest of the driver's life. And a cell
expected to refuse whose card fell off the bus printed its refusal against no card, and was green.
Real sshd nodes with a wrapped nvidia-smi stand-in, as in test_redteam147.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nodes import standin_variant
from test_redteam147 import OFF_THE_BUS, T4, _node, _one_cell
from test_verdicts import MIN75

from orchestrator.run import driver_check, gpu_state


def _probe_ecc(count: str) -> str:
    """An arm for the probe's own query (every card, its ECC count last): the card had COUNT
    uncorrectable ECC errors before the run started."""
    row = f"0, {T4.uuid(0)}, {T4.name}, {T4.cc}, {T4.driver}, {T4.memory}, {count}"
    return f'  *--query-gpu=index,uuid*ecc.errors*) echo "{row}"; exit 0 ;;\n'


def _look_ecc(count: str) -> str:
    """An arm for the look after a failed run: the card's state, COUNT uncorrectable errors now."""
    return f'  *--query-gpu=mig.mode.current,compute_mode*) echo "Disabled, Default, {count}"; exit 0 ;;\n'


def _driver_check(tmp_path: Path) -> str:
    with sqlite3.connect(tmp_path / "farm" / "results.db") as db:
        [(said,)] = db.execute("SELECT driver_check FROM node_snapshots").fetchall()
    return said or ""


FAILNUM = standin_variant("FAILNUM", MIN75, "MIN_CC=75")


def test_a_kernels_failure_on_a_card_with_old_ecc_errors_is_its_own(make_farm, tmp_path: Path) -> None:
    """The card had 3 uncorrectable ECC errors at the probe and still 3 after the kernel failed its
    numbers: none came during the cell, so the failure is the kernel's (it was infra-error, "reset
    the card", for every failing kernel on that card). The node's record says the old errors."""
    node = _node(tmp_path / "node", _probe_ecc("3") + _look_ecc("3"))
    outcome, reason = _one_cell(make_farm, tmp_path, node, FAILNUM)
    assert outcome == "fail", reason
    assert "mismatch at element 17" in reason, reason
    said = _driver_check(tmp_path)
    assert "GPU 0 (Tesla T4" in said and "counts 3 uncorrectable ECC errors" in said, said


def test_ecc_errors_that_came_during_the_cell_are_the_nodes(make_farm, tmp_path: Path) -> None:
    """3 at the probe, 4 after the run: one came during the cell, the failure is the node's."""
    node = _node(tmp_path / "node", _probe_ecc("3") + _look_ecc("4"))
    outcome, reason = _one_cell(make_farm, tmp_path, node, FAILNUM)
    assert outcome == "infra-error", reason
    assert "1 uncorrectable ECC error since the node's probe" in reason and "3 at the probe" in reason, reason


def test_cudas_ecc_words_on_a_card_with_only_old_errors_are_no_pass_and_no_excuse(make_farm, tmp_path: Path) -> None:
    """CUDA's "uncorrectable ECC error encountered" in the kernel's own output still makes its pass
    no pass; where the card's count did not rise over the probe's, the node is not blamed for it."""
    prelude = tmp_path / "ecc.sh"
    prelude.write_text('echo "CUDA error at gemm.cu:91: uncorrectable ECC error encountered" >&2\n')
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    node = _node(tmp_path / "node", _probe_ecc("3") + _look_ecc("3"))
    outcome, reason = _one_cell(make_farm, tmp_path, node, variant)
    assert outcome == "fail", reason
    assert "uncorrectable ECC error encountered" in reason and "reset the card" not in reason, reason


def test_a_card_with_ecc_off_is_judged_as_before(make_farm, tmp_path: Path) -> None:
    """ECC off ("[N/A]" at the probe and after): no count, no excuse, and no note."""
    node = _node(tmp_path / "node", _probe_ecc("[N/A]") + _look_ecc("[N/A]"))
    outcome, reason = _one_cell(make_farm, tmp_path, node, FAILNUM)
    assert outcome == "fail", reason
    assert "ECC" not in _driver_check(tmp_path)


def test_the_ecc_rule_reads_the_count_against_the_probes() -> None:
    """Unit: a count above the probe's blames the card; the same, or no count, does not; a card
    whose probe could not say (another nvidia-smi) is judged by its count as before."""
    uuid = T4.uuid(0)
    assert gpu_state.gpu_unfit(uuid, "/w", "Disabled, Default, 5\n", "", "5") == ""
    assert "2 uncorrectable ECC errors since the node's probe" in gpu_state.gpu_unfit(
        uuid, "/w", "Disabled, Default, 7\n", "", "5"
    )
    assert gpu_state.gpu_unfit(uuid, "/w", "Disabled, Default, [N/A]\n", "", "[N/A]") == ""
    assert "reset the card" in gpu_state.gpu_unfit(uuid, "/w", "Disabled, Default, 2\n", "", "")
    rows, counts = driver_check.probe_ecc([f"0, {uuid}, {T4.name}, 7.5, 550.54.15, 15360 MiB, 2"])
    assert counts == {uuid: "2"} and rows == [f"0, {uuid}, {T4.name}, 7.5, 550.54.15, 15360 MiB"]
    old = [f"0, {uuid}, {T4.name}, 7.5, 550.54.15, 15360 MiB"]  # a row without the count stays as it is
    assert driver_check.probe_ecc(old) == (old, {})


# a gate that refuses whatever card it finds (none, too): a real one reads the CC of a device it
# could not open as nothing and refuses it
REFUSER = {
    "build": 'test -f {sources} && printf \'#!/bin/sh\\necho "standin needs CC 9.0 and this device is 0.0" >&2\\n'
    "exit 1\\n' > {binary} && chmod +x {binary}",
    "inspect": "cat {binary}",
    "cc": {"min": "9.0"},
}


def test_a_refusal_on_a_card_lost_during_the_run_is_the_nodes(make_farm, tmp_path: Path) -> None:
    """The card fell off the bus: the gate found no device, printed its refusal and exited 1, and the
    farm, which asked the card after the run and found it gone, called it an expected refusal. The
    refusal was never made against the card: infra-error, saying so."""
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", OFF_THE_BUS), REFUSER)
    assert outcome == "infra-error", reason
    assert "the node lost the cell's GPU" in reason and "refus" in reason, reason


def test_a_refusal_on_a_sound_card_is_still_expected(make_farm, tmp_path: Path) -> None:
    """Guard: the same gate on a card nvidia-smi answers for refused as it must."""
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", ""), REFUSER)
    assert outcome == "expected-refusal", reason
