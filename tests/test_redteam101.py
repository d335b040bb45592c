"""Red-team round 101: kernel commands that run the kernel on another machine or card than the one
the farm pinned the cell to, while the farm files the pass under the pinned one.

Round 96 refused the launcher options that name a host, node, partition or GPU. These went around
it: srun's short options clustered as getopt reads them (`srun -lw node1`), the launchers' own
placement variables set in the run's text (`SLURM_JOB_ID=123 srun`, `OMPI_MCA_..._hostfile=h
mpirun`), MPI's MCA parameters that name hosts (`mpirun --mca orte_default_hostfile h`), and a
plain `srun {binary}` on a node that is no Slurm partition: there srun starts a new Slurm job
wherever the login node's cluster puts it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_config import GOOD_JOB, load_error, make_farm

from orchestrator.config.farm import load_farm
from orchestrator.config.job_spec import JobSpec
from orchestrator.config.run_command import check_run


def _refused(run: str) -> str:
    job = JobSpec.model_validate(yaml.safe_load(GOOD_JOB))
    refused = check_run(job, "v1", run, Path("jobs/k.yaml"))
    return "" if refused is None else str(refused)


@pytest.mark.parametrize(
    ("run", "says"),
    [
        ("srun -lw node1 {binary}", "`srun -w`"),  # -l (label) then -w with the next word
        ("srun -lwnode1 {binary}", "`srun -w`"),
        ("srun -lpgpu-h100 {binary}", "`srun -p`"),
        ("srun -lN2 {binary}", "`srun -N`"),
        ("srun -vG1 {binary}", "`srun -G`"),
        ("srun -uM other {binary}", "`srun -M`"),
    ],
)
def test_srun_s_placing_options_in_a_cluster_are_refused(run: str, says: str) -> None:
    """getopt reads `-lw node1` as `-l -w node1`: round 96 looked at the cluster's first letter
    only, so `srun -lw gpu-h100-01 {binary}` loaded and ran the kernel on the H100 node."""
    refused = _refused(run)
    assert says in refused and "another machine" in refused, refused


@pytest.mark.parametrize("run", ["srun -lo out.log {binary}", "srun -n1 -l {binary}", "srun -Jname {binary}"])
def test_srun_clusters_that_place_nothing_still_load(run: str) -> None:
    assert _refused(run) == "", _refused(run)  # -o's and -J's value is glued: `w` there is no option


@pytest.mark.parametrize(
    "run",
    [
        "SLURM_JOB_ID=123 srun {binary}",  # a step of another job: its node, its GPU
        "SLURM_JOBID=123 srun -n 1 {binary}",
        "env SLURM_PARTITION=h100 srun {binary}",
        "SLURM_NODELIST=gpu-h100-01 srun {binary}",
        "SLURM_CONF=/other/slurm.conf srun {binary}",  # another cluster's controller
        "export SLURM_PARTITION=h100; srun {binary}",
        "SRUN_EXPORT_ENV=NONE srun {binary}",
        "OMPI_MCA_orte_default_hostfile=hosts mpirun -np 1 {binary}",
        "PRTE_MCA_prte_default_hostfile=hosts mpirun -np 1 {binary}",
        "HYDRA_HOST_FILE=hosts mpiexec -n 1 {binary}",
        "I_MPI_HYDRA_HOST_FILE=hosts mpiexec -n 1 {binary}",
        "${SLURM_JOB_ID:=123} 2>/dev/null; srun {binary}",
    ],
)
def test_a_launchers_placement_variables_set_in_the_run_are_refused(run: str) -> None:
    """A run of one kernel command goes to the node's shell as written, and the launcher reads its
    own variables: `SLURM_JOB_ID=123 srun {binary}` ran the kernel as a step of job 123, on that
    job's node and GPU, `OMPI_MCA_orte_default_hostfile=hosts mpirun` on the file's hosts, with no
    option round 96 looks at (the node runner gives a request the node's own SLURM_*, OMPI_*, ...:
    the shell path did not)."""
    refused = _refused(run)
    assert "other than read" in refused and "launchers" in refused, refused


@pytest.mark.parametrize(
    "run", ['echo "job $SLURM_JOB_ID ${SLURM_NODELIST:-none} ${OMPI_COMM_WORLD_RANK}"; {binary}', "{binary} $SLURM_X"]
)
def test_reading_a_launchers_variables_still_loads(run: str) -> None:
    assert _refused(run) == "", _refused(run)


@pytest.mark.parametrize(
    "run",
    [
        "mpirun --mca orte_default_hostfile hosts -np 1 {binary}",
        "mpirun -mca prte_default_hostfile hosts -np 1 {binary}",
        "mpirun --gmca orte_default_hostfile hosts -np 1 {binary}",
        "mpirun --mca plm_rsh_agent ./agent.sh -np 1 {binary}",
        "mpirun --mca mca_base_param_files ./params.conf -np 1 {binary}",  # a file of the run's: a hostfile in it
        "mpirun --mca ras_base_launch_orted_on_hn 1 -np 1 {binary}",
    ],
)
def test_mca_parameters_that_choose_hosts_are_refused(run: str) -> None:
    """`mpirun --mca orte_default_hostfile hosts {binary}` is `--hostfile hosts` by another name."""
    refused = _refused(run)
    assert "`mpirun" in refused and "another machine" in refused, refused


def _slurm_and_ssh_farm(ssh: bool) -> str:
    other = '  t4:\n    host: 127.0.0.1\n    port: 2222\n    cc: "7.5"\n' if ssh else ""
    return (
        "database: sqlite:///results.db\nnodes:\n  a100:\n    transport: slurm\n    partition: a100\n"
        "    gres: gpu:1\n" + other
    )


@pytest.mark.parametrize("run", ["srun {binary}", "srun -n 1 --overlap {binary}", "timeout 60 srun {binary} 5"])
def test_srun_in_a_run_is_refused_where_a_node_is_no_slurm_partition(tmp_path: Path, run: str) -> None:
    """On an SSH or local node that is a login node of some cluster, `srun {binary}` starts a new
    Slurm job on whatever machine Slurm picks, and the farm filed its pass under the node's own
    card. Only in a Slurm partition's job (transport: slurm) does srun stay in the cell's
    allocation: a run using srun on a farm with another kind of node is refused at load, naming
    the job file, the key and the nodes."""
    job = GOOD_JOB.replace("    cc: {min", f"    run: '{run}'\n    cc: {{min")
    err = load_error(make_farm(tmp_path, farm=_slurm_and_ssh_farm(ssh=True), job=job))
    assert err.file.endswith("k.yaml") and err.key == "variants.v1.run", str(err)
    assert "t4" in str(err) and "transport: slurm" in str(err) and "a100" not in err.found, str(err)
    # the same run on a farm of Slurm partitions alone loads
    (tmp_path / "other").mkdir()
    farm = load_farm(make_farm(tmp_path / "other", farm=_slurm_and_ssh_farm(ssh=False), job=job))
    assert farm.jobs["k"].spec.variants["v1"].run == run


@pytest.mark.parametrize(
    ("run", "says"),
    [
        ("mpirun --rankfile=ranks -np 1 {binary}", "`mpirun --rankfile`"),  # a rankfile names hosts
        ("mpirun --app=appfile {binary}", "`mpirun --app`"),
        ("mpirun --tune=params.conf -np 1 {binary}", "`mpirun --tune`"),
        ("mpirun --dvm-uri=file:dvm.uri -np 1 {binary}", "`mpirun --dvm-uri`"),
        ("mpirun --prtemca=prte_default_hostfile=h {binary}", "`mpirun --prtemca`"),
        ("mpirun --launch-agent=./agent.sh -np 1 {binary}", "`mpirun --launch-agent`"),
        ("mpiexec -bootstrap-exec=./agent.sh -n 1 {binary}", "`mpiexec -bootstrap-exec`"),
        ("mpiexec --launcher-exec=./agent.sh -n 1 {binary}", "`mpiexec --launcher-exec`"),
        ("mpirun --mca orte_rsh_agent ./agent.sh -np 1 {binary}", "`mpirun --mca orte_rsh_agent`"),
    ],
)
def test_mpi_placing_options_written_with_their_value_after_an_equals_sign_are_refused(run: str, says: str) -> None:
    """The walk takes `--option=value` whole, so an option the farm did not list as placing loaded
    that way (`mpirun --rankfile=r {binary}`, the rankfile naming the H100 machine)."""
    refused = _refused(run)
    assert says in refused and "another machine" in refused, refused


@pytest.mark.parametrize(
    "run",
    [
        "nsys profile -n false {binary}",
        "nsys profile --inherit-environment=false {binary}",
        "nsys profile -nfalse {binary}",
    ],
)
def test_a_launcher_that_starts_the_kernel_without_the_farms_pin_is_refused(run: str) -> None:
    """`nsys profile --inherit-environment false {binary}` started the kernel without the farm's
    CUDA_VISIBLE_DEVICES: on a node of several cards it ran on CUDA's device 0, whatever card the
    cell was pinned to, and the pass was filed under the pinned one."""
    refused = _refused(run)
    assert "`nsys --inherit-environment`" in refused and "another card" in refused, refused


@pytest.mark.parametrize("run", ["nsys profile -o trace {binary}", "nsys profile -t cuda,nvtx {binary}"])
def test_nsys_s_other_options_still_load(run: str) -> None:
    assert _refused(run) == "", _refused(run)


def test_other_schedulers_host_lists_set_in_the_run_are_refused() -> None:
    """Hydra reads PBS's and LSF's host lists where it finds them: `PBS_NODEFILE=h mpiexec`."""
    for run in ("PBS_NODEFILE=hosts mpiexec -n 1 {binary}", "LSB_HOSTS=h100 mpiexec -n 1 {binary}"):
        assert "other than read" in _refused(run), _refused(run)
