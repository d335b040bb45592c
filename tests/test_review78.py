"""Review round 78: rounds 68-76 read against what a real node and the real nvcc 13.0 hand the farm.

1. A false green near round 73's fix: nvcc writes a call over several lines (`call.uni`, then the
   callee's name on a line of its own, then its arguments), and the PTX statements were cut at each
   line, so a device function named as a PTX instruction without a dot (`ldmatrix`, `mma`, `wgmma`)
   was read as that opcode wherever it was called: `instructions: {ldmatrix: 1}` was met, on a card
   that runs the cubin and on one that compiles the PTX, by a kernel holding no ldmatrix at all.
   cuobjdump's own head lines of each PTX part (`arch = sm_80`, `host = linux`) were read as the
   opcodes `arch` and `host` too. A statement now ends at its `;` (or a brace); the lines that open
   with a dot (`.loc`, `.version`: directives with no `;`) are dropped from it. Checked against the
   real CUTLASS sm_80 build's PTX, and -lineinfo and -G builds: the same instructions counted.
   A pass stored on PTX names counted so is flagged until it runs again (report/rejudged.py).
2. A false green of round 74's shell check against its python twin: an empty LD_LIBRARY_PATH
   entry (a trailing `:`, as `export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH` leaves
   where none was set) is the kernel's current folder to the loader, its work folder (seen with
   LD_DEBUG=libs: the bare `glibc-hwcaps/...` entries). The python runner noted it (preload-env),
   the shell scripts only showed it (`"$farm_ld/"` read as `/`). And an entry holding `$` (`/$ORIGIN`)
   is expanded by the loader (`$ORIGIN`: the binary's own folder, in the cell), which both read as a
   plain folder of the node's.

Real nvcc 13.0 and cuobjdump, as round 73's tests build them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_redteam73 import _built

from orchestrator.config.capability import ComputeCapability
from orchestrator.report.rejudged import jit_unbacked
from orchestrator.run import commands as shell_commands
from orchestrator.run import machine_code
from orchestrator.run.node import kernel_commands
from orchestrator.run.node.kernel_commands import KernelCommands

# a kernel whose only "ldmatrix" is a device function it calls (not inlined: nvcc writes the call)
CALLS_LDMATRIX = r"""
extern "C" __device__ __noinline__ void ldmatrix(float *out) { out[threadIdx.x] = 2.0f; }
extern "C" __global__ void k(float *out) { ldmatrix(out); }
"""


@pytest.mark.parametrize("cc", ["8.0", "9.0"])  # the sm_80 cubin an A100 runs; the PTX an H100 compiles
def test_a_called_function_named_as_a_ptx_instruction_is_no_instruction(tmp_path: Path, cc: str) -> None:
    dump, elf, ptx, _ = _built(tmp_path, "-arch=sm_80", CALLS_LDMATRIX)
    assert "call.uni" in dump and "\nldmatrix," in dump  # the callee's name on a line of its own
    names = ["ldmatrix", "arch", "host", "st.global"]
    counted = machine_code.count_for_card(dump, names, ComputeCapability.parse(cc), elf, ptx)
    assert counted.counts == {"ldmatrix": 0, "arch": 0, "host": 0, "st.global": 1}, counted


def test_ptx_statements_over_lines_and_after_line_directives() -> None:
    """What nvcc writes: a label alone on its line, `.loc` lines (no `;`) before a statement."""
    ptx = (
        "$L__BB0_1:\n\t.loc\t1 5 1\n\tmma.sync.aligned.m16n8k8 {%f1}, {%r1}, {%r2}, {%f2};\n"
        "\tcall.uni \n\tmma, \n\t(\n\tp\n\t);"
    )
    assert machine_code.count_instructions(ptx, ["mma.sync", "mma", "call.uni"], ptx=True) == {
        "mma.sync": 1,
        "mma": 1,  # the mma.sync's, not the callee named mma
        "call.uni": 1,
    }


def test_a_stored_pass_on_ptx_names_cut_at_lines_is_not_current(tmp_path: Path) -> None:
    """A pass stored before this review on PTX names counted as opcodes of PTX cut at each line (a
    called function's name met them): flagged until it runs again; one counted now stands."""
    for path, cc in (("native", "8.0"), ("ptx-jit", "9.0")):
        said = machine_code.PTX_OPCODES
        head = f"{machine_code.SOURCE_PTX} compute_80 PTX" if path == "native" else machine_code.JIT_COUNTED
        old = {"inspect": {"detail": f"{head} ...; {said}"}}
        why = jit_unbacked(path, {"ldmatrix": 1}, cc, old)
        assert why is not None and "ldmatrix" in why and "runs again" in why, why
        assert jit_unbacked(path, {"HMMA": 1}, cc, old) is None
    dump, elf, ptx, _ = _built(tmp_path, "-arch=sm_80", CALLS_LDMATRIX)
    for cc in ("8.0", "9.0"):
        counted = machine_code.count_for_card(dump, ["st.global"], ComputeCapability.parse(cc), elf, ptx)
        path = "native" if cc == "8.0" else "ptx-jit"
        assert jit_unbacked(path, {"st.global": 1}, cc, {"inspect": {"detail": counted.where}}) is None, counted


@pytest.mark.parametrize("path", ["/usr/local/cuda/lib64:", ":/usr/local/cuda/lib64", "/usr/lib::/opt/l", "/$ORIGIN"])
def test_a_library_path_entry_the_loader_reads_as_the_work_folder_is_noted_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setattr(kernel_commands, "PRELOAD_FILE", str(tmp_path / "none"))
    runner = KernelCommands(copy="/c/bin/k").preload_notes({b"LD_LIBRARY_PATH": path.encode()})
    script = f"exec 6>&1; {shell_commands._jit_check('/c', str(tmp_path / 'none'))}"
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": path}
    shell = subprocess.run(["sh", "-c", script], env=env, capture_output=True).stdout.decode().split()
    assert runner == [b"preload-env=LD_LIBRARY_PATH"]
    assert shell == ["preload-env=LD_LIBRARY_PATH"]


def test_the_nodes_own_library_path_is_still_only_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lent H200's login (start-node.sh: its kit's lib), NVIDIA's containers', a conda env's."""
    monkeypatch.setattr(kernel_commands, "PRELOAD_FILE", str(tmp_path / "none"))
    for path in ("/work/main/.kit/lib", "/usr/local/nvidia/lib:/usr/local/nvidia/lib64", "/opt/conda/envs/x/lib"):
        runner = KernelCommands(copy="/c/bin/k").preload_notes({b"LD_LIBRARY_PATH": path.encode()})
        script = f"exec 6>&1; {shell_commands._jit_check('/c', str(tmp_path / 'none'))}"
        env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": path}
        shell = subprocess.run(["sh", "-c", script], env=env, capture_output=True).stdout.decode().split()
        assert (runner, shell) == ([b"libpath-env=LD_LIBRARY_PATH"], ["libpath-env=LD_LIBRARY_PATH"]), path
