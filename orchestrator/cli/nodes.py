"""`farm nodes` and `farm jobs`: what the nodes really are, and the jobs as the farm reads them."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.errors import EXIT_OK, FarmError
from orchestrator.terminal import card_text, printable

if TYPE_CHECKING:  # the pipeline's modules are imported by the commands that use them: `farm --help` needs none
    pass

from orchestrator.cli.base import _load, farm_options, handle_errors, main


@main.command()
@farm_options
@handle_errors
def nodes(config_path: Path, database: str | None) -> None:
    """Probe every node and print what it really is (GPU, CC, driver, nvcc).

    Example: farm nodes --config farms/hopper.yaml
    """
    from orchestrator.errors import NodeUnusable
    from orchestrator.output_secrets import farm_masker
    from orchestrator.progress import describe_node
    from orchestrator.run.node_setup import check_probed
    from orchestrator.run.probe import probe
    from orchestrator.transport import transport_for

    farm = _load(config_path, database, opens_database=False)
    # a node's error quotes what it said (a wrapper echoing its token): masked as a run's lines are
    masked = farm_masker(farm.spec, farm.database_url).text
    header = f"{'node':<12} {'enabled':<7} {'GPU':<28} {'CC':<5} {'driver':<14} {'nvcc':<10} {'real':<5} notes"
    click.echo(header)
    worst = EXIT_OK
    for name, node in farm.nodes.items():
        if not node.enabled:
            click.echo(f"{name:<12} {'no':<7} {'(declared) ' + (node.gpu or '-'):<28} {node.cc or '-':<5}")
            continue
        try:
            with transport_for(name, node) as transport:
                snap = probe(transport)
                # what `farm verify` refuses is not a node to print as usable: a failing nvidia-smi was a
                # green "no GPU" row, exit 0, while the night's run made every cell of it infra-error
                check_probed(farm, transport, snap)
        except NodeUnusable as err:
            click.echo(f"{name:<12} {'yes':<7} unusable: {printable(masked(str(err)), keep_newlines=False)}")
            worst = 4
            continue
        except FarmError as err:
            click.echo(f"{name:<12} {'yes':<7} unreachable: {printable(masked(str(err)), keep_newlines=False)}")
            worst = 4
            continue
        notes = describe_node(name, snap, None) if snap.cc_mismatch else ""
        if node.pypi_toolchain and snap.nvcc_version is None:  # not probed: the run ships it first
            snap = dataclasses.replace(snap, nvcc_version=f"{node.pypi_toolchain} (PyPI, shipped by verify)")
        if not snap.gpus:
            click.echo(
                f"{name:<12} {'yes':<7} {'no GPU':<28} {'-':<5} {'-':<14} {snap.nvcc_version or 'none':<10} "
                f"{'no':<5} {notes.strip()}"
            )
        # the card's name, its driver field and the notes (describe_node quotes the name) are what the
        # node's nvidia-smi printed: an escape sequence in the driver field reached the terminal raw
        # (OSC 52 set the operator's clipboard: a red-team finding); so each field is escaped
        notes = printable(notes, keep_newlines=False)
        for gpu in snap.gpus:
            why = "" if gpu.verified else f" {printable(gpu.check, keep_newlines=False)}: certifies nothing"
            # the card as terminal.card_text shows it: a Cyrillic "\u041d100" read as the real H100 (review 213)
            label = f"{gpu.index}: {card_text(gpu.name)}" if len(snap.gpus) > 1 else card_text(gpu.name)
            driver = printable(snap.driver or "-", keep_newlines=False)
            click.echo(
                f"{name:<12} {'yes':<7} {label:<28} {gpu.cc!s:<5} "
                f"{driver:<14} {snap.nvcc_version or 'none':<10} {'yes' if gpu.verified else 'no':<5} "
                f"{(notes + why).strip()}"
            )
        if node.transport == "local":
            _local_env_note(name, node.env)
    sys.exit(worst)


def _local_env_note(name: str, declared: dict[str, str]) -> None:
    """A local node's commands get a login's variables of the farm's, no other (review 139): the names
    left out, so an operator whose kernel misses one finds why (names only: a value may be a secret)."""
    import os

    from orchestrator.transport.local_env import not_passed

    left = not_passed(os.environ, declared)
    if left:
        shown = ", ".join(left)  # all of them: the one a kernel misses is what the operator looks for
        click.echo(
            printable(
                f"{name}: the farm's variables its commands do not get (a login's only, no credential): {shown}; "
                "one a kernel needs goes in the node's `env:` in farm.yaml",
                keep_newlines=False,
            )
        )


@main.command()
@click.argument("kernels", nargs=-1, metavar="[KERNEL]...")
@farm_options
@handle_errors
def jobs(kernels: tuple[str, ...], config_path: Path, database: str | None) -> None:
    """Print each kernel's job as the farm reads it, as YAML, with where each
    field came from: its job file, its source's header, or a default.
    Reads the configuration only (no database, no node).

    Examples: farm jobs;  farm jobs cutlass_gemm wgmma_gemm
    """
    from orchestrator.config.job_yaml import job_yaml
    from orchestrator.plan import SelectionError

    farm = _load(config_path, database, opens_database=False)
    unknown = [k for k in kernels if k not in farm.jobs]
    if unknown:
        said = f"no job for kernel {', '.join(map(repr, unknown))}; kernels: {', '.join(farm.jobs)}"
        # a cell (`toy:plain`, as verify and bisect take it) names its kernel first: `jobs` shows whole jobs
        meant = [k.split(":", 1)[0] for k in unknown if ":" in k and k.split(":", 1)[0] in farm.jobs]
        if meant:
            said += f" (`farm jobs` takes kernel names, not kernel:variant: farm jobs {' '.join(dict.fromkeys(meant))})"
        raise SelectionError(said)
    documents = [job_yaml(k, farm.jobs[k].spec, farm.jobs[k].provenance) for k in kernels or farm.jobs]
    click.echo(printable("---\n".join(documents)), nl=False)
