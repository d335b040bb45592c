"""Red-team 250: a kernel on a Slurm node that forges Slurm's own words on its stderr.

The job's shell wrote the command's stderr (a kernel's, through the run's fd 8) straight onto srun's
stderr, and the login side took every line of it that starts "srun: " or "slurmstepd: " for Slurm's:
a failing kernel printing slurmstepd's "*** STEP <id>.0 ON x CANCELLED AT t ***" was recorded as
SlurmCancelled (infra-error, not retried), and "Detected 1 oom-kill event(s) in StepId=<id>.0" as
SlurmOutOfMemory, where its own exit is a fail. Now the job's shell sends the command's stderr into a
file of its own (unlinked at once) and hands it back, hex-encoded, on stdout after a marker; srun's
stderr holds Slurm's lines alone. Round 248 checked on the test cluster that slurmstepd's real words
still reach srun's stderr that way (tests/test_slurm.py, 64, 75, 98, 214, 221 still read them)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm import SlurmCluster, running_cluster

from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import CommandTimeout
from orchestrator.transport.base import CommandResult
from orchestrator.transport.slurm import SlurmCancelled, SlurmJobError, SlurmTimeLimit, SlurmTransport


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster(cards=None) as c:
        yield c


@pytest.fixture(scope="module")
def t4(cluster: SlurmCluster) -> Iterator[SlurmTransport]:
    node = NodeSpec(
        transport="slurm", partition="t4", gres="gpu:1", pending_limit=40, env={"SLURM_CONF": str(cluster.conf)}
    )
    with SlurmTransport("t4", node) as t:
        yield t


CANCEL = 'printf "slurmstepd: error: *** STEP %s.0 ON t4node CANCELLED AT 2024-01-01T00:00:00 ***\\n" "$SLURM_JOB_ID"'
OOM = 'printf "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=%s.0. Some of your processes may have been killed by the cgroup out-of-memory handler.\\n" "$SLURM_JOB_ID"'  # noqa: E501


@pytest.mark.parametrize("forged", [CANCEL, OOM], ids=["cancel", "oom"])
def test_slurms_words_forged_on_the_commands_stderr_are_the_commands_own(t4: SlurmTransport, forged: str) -> None:
    """Before: SlurmCancelled ("cancelled while it ran; not a verdict on the command") for the
    forged cancel line, SlurmOutOfMemory for the forged OOM line, of a command that exits 3. Figure:
    the command's own exit 3, the forged line in its stderr, byte for byte, and not among Slurm's."""
    result = t4.run(f"{forged} >&2; exit 3", timeout=30)
    assert result.exit_code == 3, result
    assert result.stderr.startswith("slurmstepd: error: ") and result.stderr.endswith("\n"), result.stderr
    assert t4.last_job is not None
    assert t4.last_job.job_id and t4.last_job.job_id in result.stderr
    assert not any("slurmstepd" in m for m in t4.last_job.messages), t4.last_job.messages


def test_forged_words_and_markers_on_stdout_leave_both_streams_exact(t4: SlurmTransport) -> None:
    """Before: the same (a guard: the attack went through stderr, and its fix must keep this). Figure: Slurm's words and
    a copy of the shell's stderr marker (its token read from the job's name) printed on STDOUT are
    the command's stdout, unchanged and without a trailing newline; its stderr of 200 000 bytes with
    bytes that are not UTF-8 comes back as its first 64 KiB, decoded as before; its exit kept."""
    script = (
        't=${SLURM_JOB_NAME##*-}; printf "x\\n@@slurm-err-%s\\n41 42\\n" "$t"; '
        f"{CANCEL}; {OOM}; printf 'tail\\377no-newline'; "
        "{ printf 'A\\377B'; head -c 199997 /dev/zero | tr '\\0' e; } >&2; exit 7"
    )
    result = t4.run(script, timeout=30)
    assert result.exit_code == 7, result.stderr[:300]
    job = t4.last_job
    assert job is not None and job.job_id
    name_token = job.name.rsplit("-", 1)[1]
    lines = result.stdout.split("\n")
    assert lines[:3] == ["x", f"@@slurm-err-{name_token}", "41 42"], lines
    assert lines[3].startswith("slurmstepd: error: *** STEP ") and "oom-kill" in lines[4]
    assert lines[5] == "tail\ufffdno-newline" and len(lines) == 6, lines
    assert result.stderr == "A\ufffdB" + "e" * (65536 - 3)
    assert not any("slurmstepd" in m or "oom" in m for m in job.messages), job.messages


def test_slurms_own_cancel_after_a_long_stderr_is_still_slurms(
    cluster: SlurmCluster, t4: SlurmTransport, tmp_path: Path
) -> None:
    """Before: a command's stderr of more than 64 KiB filled what the login side keeps of srun's
    stderr, slurmstepd's real "*** STEP <id>.0 ... CANCELLED" after it was cut off, and a step an
    operator cancelled (scancel JOBID.0) read as the command's own exit 137. Figure: SlurmCancelled,
    Slurm's line among the job's messages."""
    started = tmp_path / "started"
    got: dict[str, BaseException] = {}

    def job() -> None:
        try:
            t4.run(f'head -c 100000 /dev/zero | tr "\\0" e >&2; touch {started}; sleep 20; exit 4', timeout=60)
        except BaseException as err:  # asserted below
            got["error"] = err

    worker = threading.Thread(target=job)
    worker.start()
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # its start line has reached srun
    assert t4.last_job is not None
    job_id = next(j for j in cluster.jobs() if j["name"] == t4.last_job.name)["id"]
    cluster.cmd(["scancel", f"{job_id}.0"])
    worker.join(60)
    assert isinstance(got.get("error"), SlurmCancelled), repr(got.get("error"))
    assert any("CANCELLED AT" in m for m in t4.last_job.messages), t4.last_job.messages


def test_a_compute_node_without_a_temp_file_is_infra(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Before: no temp file was made. Figure: where mktemp fails on the compute node the command does
    not run (its stderr would go to srun's) and the job is a SlurmJobError naming mktemp, not exit 125."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mktemp").write_text("#!/bin/sh\necho 'mktemp: No space left on device' >&2\nexit 1\n")
    (fake / "mktemp").chmod(0o755)
    env = {"SLURM_CONF": str(cluster.conf), "PATH": f"{fake}:{os.environ['PATH']}"}
    node = NodeSpec(transport="slurm", partition="t4", gres="gpu:1", pending_limit=40, env=env)
    with SlurmTransport("t4", node) as t, pytest.raises(SlurmJobError, match="could not make a temporary file") as err:
        t.run(f"touch {tmp_path}/ran", timeout=30)
    assert "No space left on device" in str(err.value) and not (tmp_path / "ran").exists()


def test_the_shell_marker_is_read_from_the_last_copy() -> None:
    """Before: no such reading. Figure: the hex after the shell's own (last) marker is the stderr, a
    copy earlier on stdout stays stdout, and hex the shell did not write comes back as it was."""
    from orchestrator.transport.slurm_ending import command_output  # new in this round

    assert command_output("ab", "out\n@@slurm-err-ab\nx\n@@slurm-err-ab\n 68 69\n 0a\n") == (
        "out\n@@slurm-err-ab\nx",
        "hi\n",
        False,
    )
    assert command_output("ab", "no marker") == ("no marker", None, False)
    assert command_output("ab", "@@slurm-notemp-ab\n") == ("", None, True)
    assert command_output("ab", "\n@@slurm-err-ab\nzz\n")[1] == "zz\n"


class HungLogin:
    """A login node whose srun never returns; squeue answers `said` with `code`."""

    def __init__(self, code: int, said: str) -> None:
        self.code, self.said, self.asked = code, said, []

    def run(self, command: str, timeout: float) -> CommandResult:
        self.asked.append(command)
        if "srun " in command:
            raise CommandTimeout("node 'x': command still running after 9 s; killed")
        return CommandResult(command, self.code if command.startswith("squeue") else 0, self.said, "", 0.1)


@pytest.mark.parametrize(
    ("code", "said", "kind", "words"),
    [
        (1, "squeue: error: Munge encode failed: Failed to access socket", SlurmJobError, "munge, slurmctld"),
        (0, "", SlurmJobError, "Slurm no longer lists the job: it ended, but srun never said so"),
        (0, "COMPLETED\n", SlurmJobError, "the job ended (COMPLETED), but srun never said so"),
        (0, "RUNNING\n", SlurmTimeLimit, "Slurm still has the job RUNNING"),
    ],
)
def test_an_srun_that_never_returns_says_what_slurm_knows(
    code: int, said: str, kind: type[SlurmJobError], words: str
) -> None:
    """Before: "Slurm job ... still running after N s; cancelled" (SlurmTimeLimit, not retried) whatever
    Slurm knew: a job long ended (slurmstepd crashed) or a Slurm nobody could ask (munge dead). Figure:
    squeue is asked first; its answer is in the words, and only a job Slurm still holds is SlurmTimeLimit."""
    t = SlurmTransport("x", NodeSpec(transport="slurm", partition="p", pending_limit=5))
    login = HungLogin(code, said)
    t._login = login  # type: ignore[assignment]
    with pytest.raises(SlurmJobError) as err:
        t._run("true", timeout=4)
    assert type(err.value) is kind, repr(err.value)
    assert words in str(err.value) and "had not returned after 4 s" in str(err.value), str(err.value)
    assert "still running after" not in str(err.value).split("cancelled (")[0]
    assert "squeue: error: Munge" in str(err.value) if code else True
    assert err.value.retryable  # a passing fault, as the time limit of a job the farm gave up on was
    assert any(c.startswith("scancel") for c in login.asked), login.asked
