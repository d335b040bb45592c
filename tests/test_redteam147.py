"""Red-team round 147: a GPU node whose card or driver breaks mid-run, told from a kernel's bug.

Each node is a real OpenSSH sshd on loopback; only the GPU is a stand-in: its nvidia-smi, wrapped to
answer as a card in the state under test would, while the stand-in kernel sees the card through its
own device query (`nvidia-smi -i UUID --query-gpu=compute_cap`), as a CUDA program sees it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from nodes import CARDS, SshNode, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

from orchestrator.classify.cuda_errors import cuda_error_pattern

T4 = dataclasses.replace(CARDS["t4"], salt="rt147")  # a card of its own UUID


def _node(root: Path, answers: str) -> SshNode:
    """A T4 stand-in node whose nvidia-smi answers the `case "$*"` arms of `answers` itself."""
    node = SshNode("odd", root, T4)
    node.prepare()
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    smi.write_text(f'#!/bin/sh\ncase "$*" in\n{answers}esac\nexec {real} "$@"\n')
    smi.chmod(0o755)
    return node


def _one_cell(make_farm, tmp_path: Path, node: SshNode, variant: dict) -> tuple[str, str]:
    node.start()
    try:
        entry = node.farm_entry(tmp_path / "work", runner="auto")
        config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", {"v": variant})], retries=0)
        _, summary = run(config)
    finally:
        node.stop()
    [row] = rows(tmp_path / "farm" / "results.db", summary.run_id).values()
    return row["outcome"], row["reason"] or ""


# The card fell off the bus: every question of it by its UUID (the kernel's device query, the farm's
# look after the run) gets the driver's words for a card it cannot reach, nvidia-smi exiting 15.
OFF_THE_BUS = (
    '  *-i\\ *) echo "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error"; exit 15 ;;\n'
)


# a kernel that never checks its CUDA calls, and whose result check prints and returns 0: a shell
# script for the kernel (the test is about the node, not a compiler)
SLOPPY = {
    "build": "test -f {sources} && printf '#!/bin/sh\\necho \"max error: nan (tolerance 1e-3)\"\\n' > {binary} "
    "&& chmod +x {binary}",
    "inspect": "cat {binary}",
    "cc": MIN75,
}


def test_a_card_lost_under_a_run_that_exits_0_without_its_marker_is_the_nodes(make_farm, tmp_path: Path) -> None:
    """A kernel that never checks its CUDA calls and whose result check prints and returns 0: the
    card falls off the bus, the kernel's launches do nothing, it prints "max error: nan" and exits 0
    without the pass marker. The look at the node (its room, its card) was asked only after a
    non-zero exit or CUDA's own words, so nvidia-smi's "Unable to determine the device handle" was
    never read: the kernel was judged `fail`, a kernel bug, for a card that was gone. A run that did
    not pass has its card asked after it whatever its exit code: gone, the cell is infra-error."""
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", OFF_THE_BUS), SLOPPY)
    assert outcome == "infra-error", reason
    assert "the node lost the cell's GPU" in reason and "Unable to determine the device handle" in reason, reason


def test_a_sloppy_kernels_failure_on_a_sound_card_is_still_its_own(make_farm, tmp_path: Path) -> None:
    """The same kernel on a card nvidia-smi answers for: its exit 0 without the marker is its fail."""
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", ""), SLOPPY)
    assert outcome == "fail", reason
    assert "max error: nan" in reason or "marker" in reason, reason


def test_a_pass_after_cudas_uncorrectable_ecc_error_is_no_pass(make_farm, tmp_path: Path) -> None:
    """A card whose memory took an uncorrectable ECC error mid-run: CUDA ends the context with
    cudaErrorECCUncorrectable ("uncorrectable ECC error encountered"), the kernel's `CHECK` prints it
    and carries on, its tolerance check passes on the untouched buffer, and it prints its pass line,
    exit 0. CUDA's words for a context a fault ended make such a pass no pass (round 92), but these
    words were not among them: the farm certified the kernel green on a card whose memory was failing
    (nvidia-smi: 1 uncorrectable ECC error since the driver loaded). The words now fail the pass, and
    the card's look after it makes it the node's: infra-error, naming the ECC count."""
    prelude = tmp_path / "ecc.sh"
    prelude.write_text('echo "CUDA error at gemm.cu:91: uncorrectable ECC error encountered" >&2\n')
    answers = '  *--query-gpu=mig.mode.current,compute_mode*) echo "Disabled, Default, 1"; exit 0 ;;\n'
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", answers), variant)
    assert outcome == "infra-error", reason
    assert (
        "1 uncorrectable ECC error since the node's probe" in reason and "uncorrectable ECC error encountered" in reason
    ), reason


@pytest.mark.parametrize(
    "line",
    [
        "cudaDeviceSynchronize: uncorrectable ECC error encountered",
        "CUDA error: cudaErrorECCUncorrectable",
        "cuCtxSynchronize: CUDA_ERROR_ECC_UNCORRECTABLE",
        "cudaMemcpy: uncorrectable NVLink error detected during the execution",
        "error: cudaErrorNvlinkUncorrectable",
        "cuMemcpy: CUDA_ERROR_NVLINK_UNCORRECTABLE",
    ],
)
def test_cudas_words_for_a_card_whose_memory_or_link_failed_are_cuda_errors(line: str) -> None:
    """cudaErrorECCUncorrectable and cudaErrorNvlinkUncorrectable end the context (sticky errors):
    no result after either was the kernel's GPU code's, whatever it prints next."""
    assert re.search(cuda_error_pattern(), line), line


def test_a_driver_changed_under_a_running_farm_is_no_verdict_on_the_kernel(make_farm, tmp_path: Path) -> None:
    """An operator rolls the node's driver back between the probe and a cell (the module reloaded
    from 550 to 535: a bad driver, a support case): the kernel's run fails on a driver the probe
    never saw ("CUDA driver version is insufficient for CUDA runtime version" for its nvcc), the
    card still listed, nvidia-smi exiting 0. The look after the failed run asked only whether the
    card was listed, not under which driver; the probe's driver stood for the cell, and the kernel
    was `fail`. A card whose row names another driver than the probe found is no verdict on it."""
    prelude = tmp_path / "driver.sh"
    prelude.write_text('echo "cudaMalloc: CUDA driver version is insufficient for CUDA runtime version" >&2\n')
    row = f"0, {T4.uuid(0)}, {T4.name}, {T4.cc}, 535.104.05, {T4.memory}"
    # the probe asks of every card (no `-i`); the look after the run asks of the cell's card by its UUID
    answers = f'  *--query-gpu=index,uuid*-i\\ *) echo "{row}"; exit 0 ;;\n'
    variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", answers), variant)
    assert outcome == "infra-error", reason
    assert "535.104.05" in reason and T4.driver in reason, reason


def test_a_kernel_printing_a_lost_cards_words_on_a_sound_card_is_still_failed(make_farm, tmp_path: Path) -> None:
    """Guard: a failing kernel that prints nvidia-smi's and the driver's words for a lost card itself
    gets no excuse from them: the card is asked of nvidia-smi, which answers for it, so its failure
    is its own `fail`."""
    prelude = tmp_path / "words.sh"
    prelude.write_text(
        'echo "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error" >&2\n'
        'echo "NVRM: Xid 79, GPU has fallen off the bus. [GPU requires reset]" >&2\n'
    )
    variant = standin_variant("FAILNUM", MIN75, "MIN_CC=75", prelude=prelude)
    outcome, reason = _one_cell(make_farm, tmp_path, _node(tmp_path / "node", ""), variant)
    assert outcome == "fail", reason
    assert "lost the cell's GPU" not in reason, reason
