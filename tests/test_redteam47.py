"""Red-team round 47: a Slurm partition whose compute nodes differ, and cells judged against a card
their jobs did not run on.

Every command of a Slurm node is a job of its own; the probe's job read one compute node, and Slurm
was free to send each later job (staging, build, inspect, run) to any node of the partition."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from nodes import CARDS, nvidia_smi_script, query, standin_job, write_farm
from slurm import SlurmCluster, node_name, running_cluster
from test_slurm import KERNEL, VARIANTS, make_farm, run, transport

import orchestrator.run.node_setup as node_setup
from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import ConfigError
from orchestrator.run.snapshot import NodeSnapshot
from orchestrator.transport import Transport
from orchestrator.transport.slurm import SlurmJob, SlurmJobError, SlurmPendingLimit, SlurmTransport

MIXED = "mixed"  # one partition, two compute nodes: a T4 and an H100
DUO = "duo"  # one compute node with two GPUs of different models: a T4 (GPU 0) and an H100 (GPU 1)
FENCED = "fenced"  # the same, each job seeing only the GPU Slurm gave it (cgroup ConstrainDevices)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    cards = {"t4": CARDS["t4"], "h100": CARDS["h100"], DUO: [CARDS["t4"], CARDS["h100"]], FENCED: CARDS["t4"]}
    with running_cluster(cards, shared={MIXED: ["t4", "h100"]}) as c:
        (c.gpu_bin(DUO) / "visible").write_text("1\n")  # Slurm allocated the job its GPU 1
        fence(c, "0")
        yield c


def fence(cluster: SlurmCluster, allocated: str) -> None:
    """FENCED's jobs see one card, as in a device cgroup: the T4 while `allocated` says 0, else the H100."""
    folder = cluster.gpu_bin(FENCED)
    for index, card in enumerate((CARDS["t4"], CARDS["h100"])):
        (folder / f"card{index}").mkdir(exist_ok=True)
        smi = folder / f"card{index}" / "nvidia-smi"
        smi.write_text(nvidia_smi_script(card))
        smi.chmod(0o755)
    (folder / "allocated").write_text(allocated + "\n")
    (folder / "nvidia-smi").write_text(f'#!/bin/sh\nexec {folder}/card$(cat {folder}/allocated)/nvidia-smi "$@"\n')


def drain(cluster: SlurmCluster, compute_node: str) -> None:
    cluster.cmd(["scontrol", "update", f"nodename={compute_node}", "state=drain", "reason=farm test: busy"])


def resume(cluster: SlurmCluster, compute_node: str) -> None:
    cluster.cmd(["scontrol", "update", f"nodename={compute_node}", "state=resume"], check=False)
    cluster.wait_idle()


def test_a_cell_is_never_judged_against_a_compute_node_its_jobs_did_not_run_on(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition holding a T4 node and an H100 node: the probe's job read one of them, and once
    that node was busy (drained here, right after the probe), the cell's build, inspect and run jobs
    went to the other. `min75` ran and passed there, and the farm stored `pass` for the probed card:
    a pass on the H100 for a kernel that ran on the T4 (or the other way round), its compute_node
    column naming the node that did run it. Every job after the probe is now pinned to the probed
    compute node (--nodelist): the busy node keeps the cell waiting, past its pending limit an
    infra-error, never a verdict on a card the farm did not read."""
    probed: list[str] = []
    real_probe = node_setup.probe

    def probe_then_drain(setup: Transport, folders: Sequence[str]) -> NodeSnapshot:
        snapshot = real_probe(setup, folders)
        probed.append(setup.last_compute_node)
        drain(cluster, setup.last_compute_node)
        return snapshot

    monkeypatch.setattr(node_setup, "probe", probe_then_drain)
    farm = make_farm(tmp_path, cluster, {MIXED: (MIXED, {"pending_limit": 4})})
    try:
        summary = run(tmp_path, farm, {(MIXED, "min75"): None})
    finally:
        for name in probed:
            resume(cluster, name)
    assert probed and probed[0] in {node_name("t4"), node_name("h100")}
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    (snap,) = query(tmp_path / "results.db", "SELECT * FROM node_snapshots WHERE run_id = ?", summary.run_id)
    assert row["compute_node"] in (None, probed[0]), (
        f"{row['outcome']} for {snap['gpu_name']} (probed on {probed[0]}), ran on {row['compute_node']}"
    )
    assert row["outcome"] == "infra-error", row["reason"]
    assert "pending limit" in row["reason"], row["reason"]


def test_every_job_after_the_first_goes_to_the_first_jobs_compute_node(cluster: SlurmCluster) -> None:
    """The transport itself: its first job (the probe) started on one node of the partition; with that
    node drained, the next job ran on the other one, its output taken as the probed node's. Now it
    is asked for the first job's node, and waits for it (here past its pending limit). A sibling (a
    cell worker's transport) is pinned to the same node."""
    with transport(cluster, MIXED, pending_limit=3) as t:
        first = t.run("nvidia-smi --query-gpu=compute_cap --format=csv,noheader", timeout=30)
        where = t.last_compute_node
        assert first.exit_code == 0 and where in {node_name("t4"), node_name("h100")}
        twin = t.sibling()
        assert isinstance(twin, SlurmTransport)
        drain(cluster, where)
        try:
            for each in (t, twin):
                each.open()
                with pytest.raises(SlurmPendingLimit):
                    result = each.run("nvidia-smi --query-gpu=compute_cap --format=csv,noheader", timeout=30)
                    pytest.fail(f"ran on {each.last_compute_node} ({result.stdout.strip()}), probed on {where}")
        finally:
            twin.close()
            resume(cluster, where)
        assert t.run("true", timeout=30).ok and t.last_compute_node == where


def test_a_job_reported_on_another_compute_node_is_infra_not_a_result() -> None:
    """Whatever placed it there (an srun option, a cluster that ignored the request), a job whose
    shell reports another compute node than the first job's is no result: an InfraError, not
    retried (the same request lands the same way)."""
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p", slurm_options=["--nodelist=n2"]))
    t.pinned = "n1"
    args = t.srun_arguments("farm-x-1", 30)
    assert args[-1] == "--nodelist=n1", "the farm's own placement comes after the node's slurm_options"
    elsewhere = SlurmJob(name="farm-x-1", job_id="7", compute_node="n2", started=True, state="COMPLETED")
    with pytest.raises(SlurmJobError, match="ran on n2, not on n1") as err:
        t._judge(elsewhere, 0, 0.5)
    assert not err.value.retryable


def test_a_compute_node_with_cards_of_several_models_is_unusable(cluster: SlurmCluster, tmp_path: Path) -> None:
    """One compute node, a T4 (GPU 0) and an H100 (GPU 1), and `gres: gpu:1`: Slurm chose each job's
    GPU (here the H100, through CUDA_VISIBLE_DEVICES), while the farm, which cannot pin a GPU on a
    Slurm node, labelled the node's cells with the probe's first card. `min75` ran on the H100 and
    was stored `pass` for the Tesla T4. Such a node is now unusable, and says why: no cell on it
    can be judged against the card it ran on."""
    farm = make_farm(tmp_path, cluster, {DUO: (DUO, {})})
    summary = run(tmp_path, farm, {(DUO, "min75"): None})
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    ran = bytes(row["stdout"] or b"").decode(errors="replace").strip()
    assert row["outcome"] == "infra-error", (
        f"{row['outcome']} for {row['device'] or 'its one card'} ({row['reason']!r}): {ran}"
    )
    assert row["failed_stage"] == "probe"
    assert "GPUs of more than one model" in row["reason"], row["reason"]


def test_a_job_that_sees_another_card_model_than_the_probe_is_infra_not_a_verdict(
    cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same T4 + H100 compute node, but each job sees only the GPU Slurm gave it (a device
    cgroup): the probe's job got the T4 and listed it alone, so the node looked like a T4 node. With
    the T4 busy, the cell's jobs got the H100, and `min75`, run on the H100, was stored `pass` for
    the Tesla T4. Every job now names the cards it sees, and one whose cards differ from the probe
    job's is an infra-error, never a verdict: here the staging job, and the node, probed again,
    is the H100 it is, its cell a pass for the H100."""
    real_probe = node_setup.probe

    def probe_then_move(setup: Transport, folders: Sequence[str]) -> NodeSnapshot:
        snapshot = real_probe(setup, folders)
        fence(cluster, "1")  # the T4 is taken: Slurm gives the next jobs the H100
        return snapshot

    monkeypatch.setattr(node_setup, "probe", probe_then_move)
    farm = make_farm(tmp_path, cluster, {FENCED: (FENCED, {})})
    try:
        summary = run(tmp_path, farm, {(FENCED, "min75"): None})
    finally:
        fence(cluster, "0")
    db = tmp_path / "results.db"
    (row,) = query(db, "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    (snap,) = query(db, "SELECT * FROM node_snapshots WHERE run_id = ?", summary.run_id)
    ran = bytes(row["stdout"] or b"").decode(errors="replace").strip()
    assert "device CC 9.0" in ran, ran
    assert (row["outcome"], snap["gpu_name"]) == ("pass", CARDS["h100"].name), (
        f"{row['outcome']} for {snap['gpu_name']} ({row['reason']!r}): {ran}"
    )
    errors = [a["error"] or "" for a in query(db, "SELECT * FROM attempts WHERE run_id = ?", summary.run_id)]
    assert any("saw NVIDIA H100 80GB HBM3, 9.0, not Tesla T4, 7.5 as the probe's job did" in e for e in errors), errors


FARMS_OWN_OPTIONS = [
    *("--job-name=mine", "-Jmine", "-vJmine", "--job-n=mine", "--output=/tmp/o", "--export=NONE", "--jobid=7", "--"),
    *("--partition=h100", "-ph100", "--time=600", "--immediate=0", "--gres=gpu:0", "-N2", "--ntasks=2", "-Z"),
]


@pytest.mark.parametrize("option", FARMS_OWN_OPTIONS)
def test_slurm_options_that_set_what_the_farm_sets_are_refused(tmp_path: Path, option: str) -> None:
    """`slurm_options: ["--job-name=mine"]` came after the farm's own --job-name and won: a stop
    (which finds a run's jobs by the names the farm gives them) cancelled 0 jobs and the run's job
    ran on to its end; the state query found no record (state None), leaving only srun's words to
    tell Slurm's endings from the command's. --output took the job's words, --export its
    environment, --jobid made it a step of another job, and partition, time, pending limit and
    gres have keys of their own. Each is refused at load (abbreviated, or in a bundle of short
    options, as srun would read it); other options still pass."""
    entry = {"transport": "slurm", "partition": "t4", "slurm_options": [option]}
    path = write_farm(tmp_path, {"bad": entry}, [standin_job(KERNEL, VARIANTS)])
    with pytest.raises(ConfigError, match=r"nodes\.bad.*which the farm sets on every job itself"):
        load_farm(path)
    fine = ["--account=gpu", "--qos=debug", "--exclude=n9", "--nodelist=n1", "--time-min=5", "-vAgpu"]
    assert NodeSpec(transport="slurm", partition="t4", slurm_options=fine).slurm_options == fine
