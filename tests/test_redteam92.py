"""Red-team round 92: a sloppy kernel author's error check that prints CUDA's error and carries on.

A course kernel's `CHECK(call)` that prints `cudaGetErrorString(err)` and does not exit, followed by
a tolerance check that a NaN or an untouched buffer satisfies (`if (err > tol) fail` is false for a
NaN), printed its pass line and exited 0 after CUDA said its launch failed or its context died
("an illegal memory access was encountered"): the farm judged it `pass`, green, certified on that
CC, though CUDA itself said the GPU work did not happen. Each node is a real OpenSSH sshd on
loopback; only the GPU is a stand-in, and the kernel's CUDA error is printed by its prelude as the
CUDA runtime's own words.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from nodes import CARDS, Fleet, SshNode, standin_job, standin_variant
from test_verdicts import EXACT90, MIN75, rows, run
from toyfarm import toy_farm

from orchestrator.classify import Evidence, classify
from orchestrator.classify.cuda_errors import cuda_error_pattern
from orchestrator.cli import main
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation
from orchestrator.run.streams import scan

T4 = dataclasses.replace(CARDS["t4"], salt="xid92")  # a card of its own UUID

PRELUDES = {
    # the launch's error on stderr, as `CHECK` macros print it, then the kernel's pass line
    "illegal-address": 'echo "CUDA error at gemm.cu:88: an illegal memory access was encountered" >&2\n',
    # cudaGetErrorName's word, on stdout (a printf-based check)
    "out-of-resources": 'echo "launch failed: cudaErrorLaunchOutOfResources"\n',
    # the driver API's name, for a binary with no code the card loads
    "no-binary": 'echo "cuModuleLoad: CUDA_ERROR_NO_BINARY_FOR_GPU" >&2\n',
    # a device-side assert, seen by the host's next call
    "assert": 'printf "cudaDeviceSynchronize: device-side assert triggered\\n" >&2\n',
    # the control: a kernel's own words that are no CUDA error
    "clean": 'echo "warming up: 3 launches, error 0.000 (no errors)" >&2\n',
}


def test_a_pass_after_cudas_own_error_is_no_pass(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Each kernel printed its pass line and exited 0 after printing a CUDA error: `pass`, green. It is
    now `fail`, naming the error and where it was printed; the same kernel without the error passes."""
    variants = {}
    for name, text in PRELUDES.items():
        prelude = tmp_path / f"{name}.sh"
        prelude.write_text(text)
        variants[name] = standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)
    config = make_farm(
        tmp_path / "farm", {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [standin_job("standin", variants)]
    )
    _, summary = run(config)
    found = {
        variant: (r["outcome"], r["reason"] or "")
        for (variant, _), r in rows(tmp_path / "farm" / "results.db", summary.run_id).items()
    }
    assert found["clean"][0] == "pass", found
    said = {
        "illegal-address": ("an illegal memory access was encountered", "stderr line 1"),
        "out-of-resources": ("cudaErrorLaunchOutOfResources", "stdout line 1"),
        "no-binary": ("CUDA_ERROR_NO_BINARY_FOR_GPU", "stderr line 1"),
        "assert": ("device-side assert triggered", "stderr line 1"),
    }
    for variant, words in said.items():
        outcome, reason = found[variant]
        assert outcome == "fail", (variant, found[variant])
        for word in words:
            assert word in reason, (variant, reason)
    assert summary.exit_code != 0


def test_a_refusal_is_still_judged_by_its_gate(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """The rule is about a pass: a gate that refuses a card after a CUDA error (its device query
    failed) is judged as before, an expected refusal where the contract wants one."""
    prelude = tmp_path / "err.sh"
    prelude.write_text(PRELUDES["illegal-address"])
    variants = {"gate": standin_variant("PASS", EXACT90, "EXACT_CC=90", prelude=prelude)}
    config = make_farm(
        tmp_path / "farm", {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [standin_job("standin", variants)]
    )
    _, summary = run(config)
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    assert [r["outcome"] for r in found.values()] == ["expected-refusal"]


@pytest.mark.parametrize(
    "line",
    [
        b"CUDA error: unspecified launch failure",
        b"kernel launch: too many resources requested for launch",
        b"cudaMemcpy: misaligned address",
        b"no kernel image is available for execution on the device",
        b"error: the launch timed out and was terminated",
        b"cuLaunchKernel: CUDA_ERROR_ILLEGAL_INSTRUCTION",
        b"GPUassert: invalid configuration argument gemm.cu 41",
    ],
)
def test_cudas_error_words_are_found_line_by_line_however_the_kernel_wrote_them(line: bytes) -> None:
    """Written one byte at a time (a kernel's unbuffered stderr), after megabytes of output."""
    chunks = [b"x" * 100 + b"\n"] * 20_000 + [bytes([b]) for b in line + b"\n"]
    found = scan(chunks, {"cuda": cuda_error_pattern()}, 1 << 16)
    assert found.matches == {"cuda": 20_001}
    assert found.texts["cuda"] == line.decode()


@pytest.mark.parametrize(
    "line",
    [
        b"standin: PASS",
        b"max rel error 0 (tolerance 0.001)",
        b"0 errors, 0 warnings",
        b"checked for out of memory: none",
        b"launch failure rate 0.0 %",  # not CUDA's words for a failed launch
    ],
)
def test_a_kernels_own_words_are_no_cuda_error(line: bytes) -> None:
    assert scan([line + b"\n"], {"cuda": cuda_error_pattern()}, 1 << 16).matches == {}


def test_classify_fails_a_pass_after_a_cuda_error_and_keeps_a_declared_failure() -> None:
    must = Expectation(Outcome.PASS, "CC 7.5 is in its contract (min 7.5)")
    ev = Evidence(build_exit=0, inspect_exit=0, run_exit=0, pass_line=2, kernel_started=True, kernel_exit=0)
    assert classify(ev, must).outcome is Outcome.PASS
    ev.cuda_error = 'stderr line 1: "CUDA error: an illegal memory access was encountered"'
    verdict = classify(ev, must)
    assert verdict.outcome is Outcome.FAIL and verdict.failed_stage == "run"
    assert "an illegal memory access was encountered" in verdict.reason
    assert "the pass marker was printed" in verdict.reason


def test_a_cuda_error_on_a_card_that_needs_a_reset_is_the_nodes_fault(make_farm, tmp_path: Path) -> None:
    """An Xid mid-run: the kernel's next call says "unspecified launch failure", and it passed anyway.
    Its card is asked after such a run as after a failed one: gone bad, the cell is infra-error
    (the node's, "GPU requires reset"), not the kernel's fail."""
    node = SshNode("xid", tmp_path / "node", T4)
    node.prepare()
    smi, real = node.node_bin / "nvidia-smi", node.node_bin / "nvidia-smi.real"
    smi.rename(real)
    row = f"0, {T4.uuid(0)}, {T4.name}, [GPU requires reset], {T4.driver}, [GPU requires reset]"
    # the probe asks of every card; the look after the run asks of the cell's card by its UUID
    smi.write_text(
        f'#!/bin/sh\ncase "$*" in\n  *--query-gpu=index,uuid*-i\\ *) echo "{row}" ;;\n  *) exec {real} "$@" ;;\nesac\n'
    )
    smi.chmod(0o755)
    prelude = tmp_path / "xid.sh"
    prelude.write_text('echo "cudaMemcpy: unspecified launch failure" >&2\n')
    variants = {"plain": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=prelude)}
    node.start()
    try:
        config = make_farm(
            tmp_path / "farm",
            {"xid": node.farm_entry(tmp_path / "work")},
            [standin_job("standin", variants)],
            retries=0,
        )
        _, summary = run(config)
    finally:
        node.stop()
    [(outcome, reason)] = [
        (r["outcome"], r["reason"]) for r in rows(tmp_path / "farm" / "results.db", summary.run_id).values()
    ]
    assert outcome == "infra-error", reason
    assert "GPU requires reset" in reason and "unspecified launch failure" in reason, reason


# ------------------------------------------------------------------ job files a sloppy author writes


def _farm_jobs(root: Path, job_text: str) -> Result:
    """`farm jobs` on a toy farm whose jobs/toy.yaml is `job_text`."""
    config = toy_farm(root)
    (root / "jobs" / "toy.yaml").write_text(job_text)
    return CliRunner().invoke(main, ["jobs", "--config", str(config)])


TOY_JOB = (
    "kernel: toy\n"
    "sources: [kernels/toy.cpp]\n"
    "pass_marker: 'toy: PASS'\n"
    "refusal_marker: 'needs CC'\n"
    "variants:\n"
    "  plain:\n"
    "    build: 'g++ -O1 -o {binary} {sources}'\n"
    "    inspect: 'objdump -d {binary}'\n"
    "    instructions: {ret: RET}\n"
    "    cc: {min: '7.5'}\n"
)


@pytest.mark.parametrize("where", ["instructions", "timeout"])
def test_a_number_too_long_for_python_is_the_job_files_error(tmp_path: Path, where: str) -> None:
    """`instructions: {ret: 1000...0}` with 5,000 digits (a generated job file, a paste gone wrong):
    Python will not read an int of more than 4,300 digits, and the farm said "internal error
    (ValueError: Exceeds the limit (4300 digits) ...); this is a bug in farm", exit 70. It is the job
    file's error, exit 3, naming the file, the key, the line and what was expected."""
    digits = "1" + "0" * 5000
    text = TOY_JOB.replace("RET", digits if where == "instructions" else "1")
    if where == "timeout":
        text += f"timeout: {digits}\n"
    done = _farm_jobs(tmp_path, text)
    said = done.output
    assert done.exit_code == 3, said
    assert "bug in farm" not in said and "Traceback" not in said, said
    key = "variants.plain.instructions.ret" if where == "instructions" else "timeout"
    assert f"jobs/toy.yaml: {key}: found a number of 5001 digits (line" in said, said


@pytest.mark.parametrize(
    ("old", "new", "tag"),
    [
        ("[kernels/toy.cpp]", "!!set {kernels/toy.cpp, kernels/b.cpp}", "!!set"),
        ("'toy: PASS'", "!!binary dG95OiBQQVNT", "!!binary"),
        ("variants:\n", "variants: !!omap\n", "!!omap"),
    ],
)
def test_a_yaml_tag_the_farm_reads_nothing_by_is_refused(tmp_path: Path, old: str, new: str, tag: str) -> None:
    """`sources: !!set {a.cpp, b.cpp}` loaded: YAML's set is unordered, so the compiled files' order
    (in the build command and the certificate's identity) was Python's hash order, another in each
    run (PYTHONHASHSEED), and the kernel's certificate went stale run after run. `!!binary` made a
    marker of bytes, `!!omap` a malformed-YAML error that named no key. A tag other than YAML's
    plain scalars, lists and mappings is refused, naming the key, the line and the tag."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "b.cpp").write_text("int b() { return 1; }\n")
    done = _farm_jobs(tmp_path, TOY_JOB.replace("RET", "1").replace(old, new))
    said = done.output
    assert done.exit_code == 3, said
    assert f"found the YAML tag {tag} (line" in said, said
    assert "expected plain YAML" in said, said
