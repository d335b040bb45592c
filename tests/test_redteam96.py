"""Red-team round 96: machines with several cards, and cards that are not what they seem.

Real sshd nodes whose nvidia-smi stand-in lists cards of one name and two compute capabilities
(nvidia-smi's "NVIDIA Graphics Device", the name of every card its driver has no name for), one
card on two rows, and kernel commands whose launchers start the kernel on another machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from nodes import Card, Fleet, query, standin_job, standin_variant
from test_verdicts import run

from orchestrator.cli import main
from orchestrator.run.snapshot import Gpu

# what nvidia-smi names a card its driver has no marketing name for (an engineering sample, a
# card newer than the driver's table): two such cards of two generations read alike
UNNAMED = "NVIDIA Graphics Device"


def test_two_cards_of_one_name_and_two_ccs_are_two_columns_each_judged_on_its_own_cc(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A node's cards were grouped into the matrix's columns by name alone, the column's CC its
    first card's: on a node of two "NVIDIA Graphics Device" cards, a CC 10.0 and a CC 12.0,
    each cell went to either card, and one that ran on the 12.0 card was judged against 10.0
    and stored under CC 10.0 (results.cc) beside that card's UUID: a kernel that runs on 12.0
    only passed, certifying CC 10.0, where it refuses. Cards of one name and several CCs are now
    a column each, named with the CC, and each cell is judged and stored on its own card's."""
    cards = [Card(UNNAMED, "10.0"), Card(UNNAMED, "12.0")]
    node = ssh_fleet.add(f"unnamed-{tmp_path.name[-12:]}", cards)
    prelude = tmp_path / "slow.sh"
    prelude.write_text("sleep 1\n")  # the variants' runs overlap, over both cards
    variants = {f"v{i}": standin_variant("PASS", {"min": "10.0"}, "EXACT_CC=120", prelude=prelude) for i in range(3)}
    try:
        config = make_farm(tmp_path, {"n": node.farm_entry(tmp_path / "work")}, [standin_job("standin", variants)])
        _, summary = run(config)
    finally:
        node.stop()
    cc_of = {card.uuid(i): card.cc for i, card in enumerate(node.cards)}
    found = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    said = [(r["variant"], r["device"], r["gpu_uuid"], r["cc"], r["outcome"]) for r in found]
    for r in found:
        assert r["cc"] == cc_of[r["gpu_uuid"]], said  # stored under the CC of the card it ran on
    assert not [r for r in found if r["outcome"] == "pass" and r["cc"] == "10.0"], said
    # every variant on each card: the 10.0 card's refusals are the kernel's own (its contract serves it)
    assert sorted((r["cc"], r["outcome"]) for r in found) == sorted(
        [("10.0", "unexpected-refusal")] * 3 + [("12.0", "pass")] * 3
    ), said
    assert len({r["device"] for r in found}) == 2 and all("CC" in r["device"] for r in found), said
    # the matrix's heads: both columns are cards the node's probe found (no "gone-card" flag)
    assert CliRunner().invoke(main, ["report", "--config", str(config)]).exit_code == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    heads = dict(re.findall(r'<th data-node="n" data-device="([^"]+)">(.*?)</th>', index, re.S))
    assert sorted(heads) == [f"{UNNAMED} (CC 10.0)", f"{UNNAMED} (CC 12.0)"], heads
    assert not [h for h in heads.values() if "gone-card" in h], heads


def _snapshot_devices(gpus: list[Gpu]) -> dict[str, list[Gpu]]:
    from orchestrator.run.snapshot import NodeSnapshot

    snap = NodeSnapshot("n", "/w", "h", "Linux", None, None, None, None, len(gpus), "nvcc", None, "", None, None)
    return NodeSnapshot(**{**snap.__dict__, "gpus": tuple(gpus)}).devices()


def test_cards_of_one_name_and_one_cc_still_share_a_column() -> None:
    from orchestrator.config.capability import ComputeCapability

    cc = ComputeCapability.parse("7.5")
    gpus = [Gpu(0, "GPU-a", "Tesla T4", cc, "15360 MiB"), Gpu(1, "GPU-b", "Tesla T4", cc, "15360 MiB")]
    assert list(_snapshot_devices(gpus)) == ["Tesla T4"]


@pytest.mark.parametrize(
    ("run", "says"),
    [
        ("mpirun -np 1 -H h100.example.org {binary}", "`mpirun -H`"),
        ("mpirun -np 1 --host=h100 {binary}", "`mpirun --host`"),
        ("mpiexec -n 1 -hosts h100 {binary}", "`mpiexec -hosts`"),
        ("mpirun --hostfile hosts.txt -np 1 {binary}", "`mpirun --hostfile`"),
        ("mpirun -machinefile m -np 1 {binary}", "`mpirun -machinefile`"),
        ("srun -w gpu-h100-01 {binary}", "`srun -w`"),
        ("srun -wgpu-h100-01 {binary}", "`srun -w`"),
        ("srun --nodelist=gpu-h100-01 {binary}", "`srun --nodelist`"),
        ("srun -p h100 -n 1 {binary}", "`srun -p`"),
        ("srun --partition h100 {binary}", "`srun --partition`"),
        ("srun --gres=gpu:h100:1 {binary}", "`srun --gres`"),
        ("srun -G 1 {binary}", "`srun -G`"),
        ("srun -C h100 {binary}", "`srun -C`"),
        ("srun --jobid=4242 {binary}", "`srun --jobid`"),
        ("srun -N 2 {binary}", "`srun -N`"),
    ],
)
def test_a_launcher_that_starts_the_kernel_on_another_machine_is_refused(run: str, says: str) -> None:
    """A variant's `run` could hand the kernel to mpirun or srun with options naming where it runs:
    `mpirun -H h100 {binary}` on a T4 node ran the kernel on the H100 machine (ssh), `srun -p h100
    {binary}` on a Slurm login node or in a partition's job ran it wherever Slurm placed it, and the
    farm filed its pass under the node's own card, which never ran it. Those options are refused at
    load, naming the launcher's option: a kernel runs on the card the farm pinned it to."""
    import yaml
    from test_config import GOOD_JOB

    from orchestrator.config.job_spec import JobSpec
    from orchestrator.config.run_command import check_run

    job = JobSpec.model_validate(yaml.safe_load(GOOD_JOB))
    refused = check_run(job, "v1", run, Path("jobs/k.yaml"))
    assert refused is not None and says in str(refused) and "another machine" in str(refused), str(refused)


@pytest.mark.parametrize(
    "run",
    ["mpirun -np 2 --mca btl self {binary}", "srun -n 1 --overlap {binary}", "mpirun -np 2 --bind-to core {binary}"],
)
def test_launchers_that_keep_the_kernel_on_the_cell_s_machine_still_load(run: str) -> None:
    import yaml
    from test_config import GOOD_JOB

    from orchestrator.config.job_spec import JobSpec
    from orchestrator.config.run_command import check_run

    assert check_run(JobSpec.model_validate(yaml.safe_load(GOOD_JOB)), "v1", run, Path("jobs/k.yaml")) is None


@pytest.mark.parametrize(
    "other", ["GPU-AAAA0000-1111-2222-3333-444455556666", " gpu-aaaa0000-1111-2222-3333-444455556666"]
)
def test_one_uuid_on_two_rows_in_another_case_is_no_card_the_farm_can_pin(other: str) -> None:
    """A node whose nvidia-smi lists one UUID for two GPUs is unusable (no cell could be pinned to
    its card), but the check compared the UUIDs as text: the same UUID in capitals (or with a
    blank) on the second row made two "cards", two slots and two lock files of one GPU, whose
    cells then ran at once on it. UUIDs are compared as the hex they are."""
    from orchestrator.config.capability import ComputeCapability
    from orchestrator.config.farm_spec import NodeSpec
    from orchestrator.errors import NodeUnusable
    from orchestrator.run.node_setup import NodeSetup
    from orchestrator.run.snapshot import NodeSnapshot

    cc = ComputeCapability.parse("7.5")
    gpus = (
        Gpu(0, "GPU-aaaa0000-1111-2222-3333-444455556666", "Tesla T4", cc, "15360 MiB"),
        Gpu(1, other, "Tesla T4", cc, "15360 MiB"),
    )
    snap = NodeSnapshot("n", "/w", "h", "Linux", "Tesla T4", cc, "550", "15360 MiB", 2, "nvcc", None, "", None, None)
    snap = NodeSnapshot(**{**snap.__dict__, "gpus": gpus, "work_free_kib": 1 << 30, "tmp_free_kib": 1 << 30})
    with pytest.raises(NodeUnusable, match="more than one GPU"):
        NodeSetup.check_usable("n", NodeSpec(host="h"), snap)
