"""Red-team round 59: node faults and GPU states the farm had never seen, as a night operator meets them.

Each node is a real OpenSSH sshd on loopback; only the GPU is a stand-in: its nvidia-smi, wrapped
here to answer as a card in the state under test would (compute mode, MIG mode, a card that needs
a reset), while what a CUDA program of the kernel gets from such a card is what the stand-in
kernel gets from it: its device query (`nvidia-smi --query-gpu=compute_cap`) failing."""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path

import pytest
from nodes import CARDS, SshNode, install_sanitizer, query, standin_job, standin_variant
from test_metrics import KERNEL_ONCE, counting_runs
from test_verdicts import EXACT90, MIN75, rows, run

from orchestrator.errors import EXIT_OK
from orchestrator.run import gpu_state
from orchestrator.run.gpu_state import gpu_unfit

VARIANTS = {
    "a-pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    # a T4 must be refused by this one: its refusal needs the card's CC, as a CUDA gate's does
    "b-refuse": standin_variant("PASS", EXACT90, "EXACT_CC=90"),
}

T4 = dataclasses.replace(CARDS["t4"], salt="odd")  # the card of card_node's node, by its UUID


def card_node(root: Path, answers: str, device_query: str) -> SshNode:
    """A T4 stand-in node whose nvidia-smi answers the cases of `answers` (sh `case "$*"` arms)
    itself, and whose device query (the kernel's view of the card) prints `device_query` on
    stderr and fails; anything else goes to the usual stand-in."""
    node = SshNode("odd", root, T4)
    node.prepare()
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    smi.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        + answers
        + f'  *--query-gpu=compute_cap\\ *) echo "{device_query}" >&2; exit 1 ;;\n'
        + f'esac\nexec {real} "$@"\n'
    )
    smi.chmod(0o755)
    return node


def outcomes(make_farm, tmp_path: Path, node: SshNode) -> dict[str, tuple[str, str]]:
    node.start()
    try:
        entry = node.farm_entry(tmp_path / "work", runner="auto")
        config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", VARIANTS)], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    return {variant: (row["outcome"], row["reason"] or "") for (variant, _), row in found.items()}


def test_a_card_held_by_another_process_in_exclusive_mode_is_the_nodes_fault(make_farm, tmp_path: Path) -> None:
    """A card in compute mode EXCLUSIVE_PROCESS that another tenant's training job holds: every
    CUDA program of the farm gets "all CUDA-capable devices are busy or unavailable". The farm
    judged its passing kernel `fail` and its gate `missing-refusal`, kernel bugs both, the night's
    report red for a card someone else held. A failed run now has its card's compute mode and
    holders asked after it, as its room is: held exclusively by another, it is infra-error."""
    uuid = T4.uuid(0)
    answers = (
        '  *--query-compute-apps=*) echo "4242, /opt/lab/venv/bin/python3, ' + uuid + '" ;;\n'
        '  *--query-gpu=mig.mode.current,compute_mode*) echo "[N/A], Exclusive_Process, [N/A]" ;;\n'
    )
    node = card_node(tmp_path / "node", answers, "cudaGetDeviceProperties: all CUDA-capable devices are busy")
    found = outcomes(make_farm, tmp_path, node)
    for variant, (outcome, reason) in found.items():
        assert outcome == "infra-error", (variant, reason)
        assert "Exclusive_Process" in reason and "4242" in reason and "/opt/lab/venv/bin/python3" in reason, reason


def test_a_card_in_mig_mode_is_the_nodes_fault(make_farm, tmp_path: Path) -> None:
    """A card whose MIG mode an operator turned on (an A100 split for a class): nvidia-smi still
    lists the whole card, which the farm probed and pins its cells to, but CUDA runs on MIG slices
    only, and a program pinned to the card finds no device. Every cell was a kernel bug (`fail`,
    `missing-refusal`). A failed run on a card in MIG mode is now infra-error, saying so."""
    answers = '  *--query-gpu=mig.mode.current,compute_mode*) echo "Enabled, Default, 0" ;;\n'
    node = card_node(tmp_path / "node", answers, "cudaGetDeviceCount: no CUDA-capable device is detected")
    found = outcomes(make_farm, tmp_path, node)
    for variant, (outcome, reason) in found.items():
        assert outcome == "infra-error", (variant, reason)
        assert "MIG mode" in reason, reason


@pytest.mark.parametrize(
    ("cc", "memory", "says"),
    [
        ("[GPU requires reset]", "[GPU requires reset]", "GPU requires reset"),
        # a card whose CC no longer reads: the probe leaves such a card out; after a run, it is gone bad
        ("[N/A]", "15360 MiB", "[N/A]"),
    ],
)
def test_a_card_that_needs_a_reset_is_the_nodes_fault(
    make_farm, tmp_path: Path, cc: str, memory: str, says: str
) -> None:
    """An Xid mid-run leaves the card listed, nvidia-smi exiting 0, its fields reading "[GPU
    requires reset]". The farm's check after a failed run took the card's UUID in the answer for a
    card still there, and failed the kernel. A row whose fields are the driver's error words, or
    whose CC no longer reads ("[N/A]", a card the probe would have left out), is a card gone bad:
    infra-error, with nvidia-smi's words."""
    row = f"0, {T4.uuid(0)}, {T4.name}, {cc}, {T4.driver}, {memory}"
    # the probe asks of every card (no `-i`) and was answered as the card was then; the check
    # after the run asks of the cell's card by its UUID
    answers = f'  *--query-gpu=index,uuid*-i\\ *) echo "{row}" ;;\n'
    node = card_node(tmp_path / "node", answers, "cudaMalloc: unspecified launch failure")
    found = outcomes(make_farm, tmp_path, node)
    for variant, (outcome, reason) in found.items():
        assert outcome == "infra-error", (variant, reason)
        assert says in reason and "the node lost the cell's GPU" in reason, reason


def test_a_card_with_uncorrectable_ecc_errors_is_the_nodes_fault(make_farm, tmp_path: Path) -> None:
    """A card whose memory took uncorrectable ECC errors (a failing HBM row; nvidia-smi's
    volatile count, since the driver loaded, is non-zero): a kernel's numbers come back wrong, or
    CUDA ends it with "uncorrectable ECC error encountered", and the farm judged the kernel `fail`.
    A failed run on such a card is now infra-error, naming the count and that the card needs a reset."""
    answers = '  *--query-gpu=mig.mode.current,compute_mode*) echo "Disabled, Default, 2" ;;\n'
    node = card_node(tmp_path / "node", answers, "CUDA error: uncorrectable ECC error encountered")
    found = outcomes(make_farm, tmp_path, node)
    for variant, (outcome, reason) in found.items():
        assert outcome == "infra-error", (variant, reason)
        assert "2 uncorrectable ECC errors" in reason, reason


@pytest.mark.parametrize(
    ("mode", "apps", "expected"),
    [
        ("Disabled, Default, 0", "4242, /opt/x, {uuid}", ""),  # sharing is allowed
        ("[N/A], Exclusive_Process, [N/A]", "", ""),  # held by nobody once the run ended
        ("[N/A], Exclusive_Process, [N/A]", "4242, /opt/x, GPU-other", ""),  # another card's
        ("[N/A], Exclusive_Process, [N/A]", "77, {work}/cells/1-t/n/k+v/k, {uuid}", ""),  # the farm's own next cell
        ("[N/A], Exclusive_Process, [N/A]", "4242, [Not Found], {uuid}", "pid 4242"),
        # the farm's own next cell, named by the work folder's real path (a /home that is a link)
        ("[N/A], Exclusive_Process, [N/A]", "@@farm-workdir /data{work}\n77, /data{work}/cells/k, {uuid}", ""),
        ("[N/A], Exclusive_Process, [N/A]", "@@farm-workdir /data{work}\n77, /data{work}x/k, {uuid}", "pid 77"),
        ("Disabled, Prohibited, 0", "", "Prohibited"),
        ("Enabled, Default, 0", "", "MIG mode"),
        ("Disabled, Default, 3", "", "3 uncorrectable ECC errors"),
        ("[N/A], Default, [N/A]", "", ""),
        ("nvidia-smi stand-in: unsupported query", "", ""),  # a node that cannot say
        ("", "", ""),
    ],
)
def test_reading_the_cards_state(mode: str, apps: str, expected: str) -> None:
    """What gpu_unfit makes of nvidia-smi's answers: only the card's own state, and a holder
    that is neither the farm's (its work folder) nor on another card, is blamed."""
    uuid, work = T4.uuid(0), "/srv/farm"
    said = gpu_unfit(uuid, work, mode, apps.format(uuid=uuid, work=work))
    assert (expected in said) if expected else said == "", said


def test_a_card_slowed_by_its_own_trouble_is_no_verdict_on_the_kernels_speed(tmp_path: Path) -> None:
    """A card whose clocks its hardware holds down (a failed fan: HW thermal slowdown; a power
    supply's brake): every kernel on it is slower, and the farm judged the kernel perf-regression
    (exit 1, "worse than the median"), a regression the kernel never made, confirmed by a second
    run on the same slowed card. A confirmed regression now has its card's slowdown reasons asked
    of nvidia-smi: the card's own slowdown is infra-error, naming it; the kernel's speed is unjudged."""
    node = card_node(
        tmp_path / "node",
        f"  *--query-gpu={gpu_state.SLOW_QUERY}*) echo 'Active, Active, Not Active, Not Active' ;;\n",
        "unused",
    )
    node.start()
    try:
        codes = counting_runs(tmp_path, {"t4": node}, "auto", [(KERNEL_ONCE, "100")] * 5 + [(KERNEL_ONCE, "70 69")])
    finally:
        node.stop()
    assert codes[:5] == [EXIT_OK] * 5, codes
    found = query(tmp_path / "farm" / "results.db", "select outcome, reason from results order by run_id")
    assert [r["outcome"] for r in found] == ["pass"] * 5 + ["infra-error"], [r["reason"] for r in found]
    assert "HW thermal slowdown" in found[-1]["reason"] and "69 GFLOP/s" in found[-1]["reason"], found[-1]["reason"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Not Active, Not Active, Not Active, Not Active", ""),
        ("Not Active, Not Active, Not Active, Active", "HW power brake slowdown"),
        ("[N/A], [N/A], [N/A], [N/A]", ""),  # a card that cannot say
        ('Field "clocks_throttle_reasons.hw_slowdown" is not a valid field to query.', ""),
        ("", ""),
    ],
)
def test_reading_the_cards_slowdown(answer: str, expected: str) -> None:
    said = gpu_state.gpu_slowed(answer)
    assert (expected in said) if expected else said == "", said


def test_a_card_lost_during_the_sanitizer_run_is_the_nodes_fault(make_farm, tmp_path: Path) -> None:
    """The card falls off the bus after the kernel passed, while compute-sanitizer runs it again
    (from then on nvidia-smi says "No devices were found"): the program fails under the tool, and
    the farm judged the kernel sanitizer-error, "the program exit 1 under it", a kernel bug. The
    look at the node after a failed run (its room, its card) was made for a failed run only; a
    sanitizer run that is not clean now has its card asked after it too: gone, it is infra-error."""
    node = SshNode("odd", tmp_path / "node", T4)
    node.prepare()
    install_sanitizer(node)
    # where the confined kernel (whose nvidia-smi call this is) may write: the card's state
    lost = Path("/dev/shm") / f"farm-test-lost-{secrets.token_hex(4)}"
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    smi.write_text(
        f'#!/bin/sh\n[ -n "$STANDIN_SANITIZER_TOOL" ] && touch {lost}\n'
        f'if [ -e {lost} ]; then echo "No devices were found" >&2; exit 6; fi\nexec {real} "$@"\n'
    )
    smi.chmod(0o755)
    node.start()
    try:
        variant = standin_variant("PASS", MIN75, "MIN_CC=75", sanitize=["memcheck"])
        entry = node.farm_entry(tmp_path / "work", runner="auto")
        config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", {"s": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
        lost.unlink(missing_ok=True)
    (row,) = rows(tmp_path / "farm" / "results.db", summary.run_id).values()
    assert (row["outcome"], row["failed_stage"]) == ("infra-error", "sanitize"), row["reason"]
    assert "the node lost the cell's GPU" in row["reason"] and "No devices were found" in row["reason"], row["reason"]
