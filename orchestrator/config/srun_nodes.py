"""Where a variant's `run` may hand the kernel to srun: in a Slurm partition's own job only.

Every command of a `transport: slurm` node is an srun job on the probed compute node, so an `srun`
in the run is a step of that job, in its allocation (the card the farm's job holds). On an SSH or
local node srun has no job to join: where the machine is a login node of some cluster, `srun
{binary}` submits a new job and the kernel runs on whatever machine Slurm picks, while the farm
files its pass under the node's own card (red-team round 101, left over from round 96, which
refused only srun's placing options). Every variant runs on every node, so a run using srun is
refused at load where the farm has a node of another kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.config.jobs import Job
from orchestrator.config.kernel_calls import kernel_launchers
from orchestrator.errors import ConfigError

# launchers that, outside an allocation of the farm's own, place the kernel where a scheduler wants
_IN_A_JOB_ONLY = frozenset({"srun"})


def unbacked_launchers(jobs: Mapping[str, Job], nodes: Mapping[str, NodeSpec]) -> list[ConfigError]:
    """A ConfigError for each variant whose kernel command goes through srun while some node of the
    farm (enabled or not: `--nodes` may name any) is no Slurm partition."""
    others = sorted(
        f"{name} (transport: {node.transport})" for name, node in nodes.items() if node.transport != "slurm"
    )
    if not others:
        return []
    errors = []
    for job in jobs.values():
        for vname, variant in job.spec.variants.items():
            used = sorted(kernel_launchers(variant.run) & _IN_A_JOB_ONLY)
            if used:
                errors.append(
                    ConfigError(
                        str(job.file),
                        f"variants.{vname}.run",
                        f"{variant.run!r}, which starts the kernel through {used[0]!r} on nodes that are no Slurm "
                        f"partition: {', '.join(others)}; there srun submits a new Slurm job, which runs on "
                        "whatever machine the cluster picks, not the card the farm pinned the cell to",
                        f"{used[0]} only in a farm whose nodes are all `transport: slurm` (where it is a step "
                        "of the cell's own job), or the kernel run without it (`{binary}`, `mpirun -np 2 {binary}`)",
                    )
                )
    return errors
