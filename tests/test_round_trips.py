"""One round trip per cell, counted by a real sshd.

A cell's build, inspect and run go out to the node as one command (run/stages/):
the node runs each next stage only when the one before it succeeded by its own
reading, and the farm judges each stage from what came back. sshd logs every
command session it starts (at LogLevel VERBOSE: "Starting session: command"),
so the number of commands a run cost is counted on the node's side, not the
farm's. Setup (probe, staging, the node's final sweep) costs the same for any
number of cells; each further cell must cost exactly one command.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
from nodes import (
    CARDS,
    Fleet,
    SshNode,
    own_sleep,
    processes_matching,
    query,
    standin_job,
    standin_variant,
    write_farm,
)

from orchestrator.config.farm import load_farm
from orchestrator.config.farm_spec import NodeSpec
from orchestrator.errors import HostKeyError
from orchestrator.plan import plan_cells
from orchestrator.run import bundle, resident, staging
from orchestrator.run.bundle import Bundle
from orchestrator.run.scheduler import run_cells
from orchestrator.run.staging import StagingFailed
from orchestrator.run.summary import RunSummary
from orchestrator.store.database import Store
from orchestrator.transport import transport_for
from orchestrator.transport.base import Transport
from orchestrator.transport.ssh import SSHTransport
from orchestrator.transport.ssh_tuning import QuickAck

MIN75 = {"min": "7.5"}
# every test here, with either of the node runners (conftest.runner)
pytestmark = pytest.mark.usefixtures("runner")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> SshNode:
    fleet = Fleet(tmp_path_factory.mktemp("trips"))
    node = fleet.add("t4", CARDS["t4"], start=False)
    node.config.write_text(node.config.read_text().replace("LogLevel INFO", "LogLevel VERBOSE"))
    node.start()
    yield node
    fleet.stop()


def sessions(node: SshNode) -> int:
    return node.log.read_text(errors="replace").count("Starting session: command")


def verify(
    node: SshNode, root: Path, variants: dict[str, dict[str, object]], **entry: object
) -> tuple[RunSummary, int]:
    """A run of these variants on the node (ENTRY: more of its farm.yaml entry): its summary and
    the commands sshd started for it."""
    farm_file = write_farm(
        root,
        {"t4": node.farm_entry(root.parent / "work", build_jobs=2, **entry)},
        [standin_job("standin", variants)],
    )
    farm = load_farm(farm_file)
    store = Store(farm.database_url)
    before = sessions(node)
    try:
        summary = run_cells(farm, store, plan_cells(farm, None, None), cache_dir=root.parent / "cache")
    finally:
        store.close()
    return summary, sessions(node) - before


def passing(n: int) -> dict[str, dict[str, object]]:
    build = "g++ -O1 -DMODE_PASS -DMIN_CC=75 -DV={i} -o {{binary}} {{sources}}"
    return {f"p{i}": standin_variant("PASS", MIN75, "MIN_CC=75", build=build.format(i=i)) for i in range(n)}


def test_each_further_cell_costs_one_command_or_none_with_the_resident_runner(
    node: SshNode, tmp_path: Path, runner: str
) -> None:
    one, cold_one = verify(node, tmp_path / "one", passing(1))
    _, warm_one = verify(node, tmp_path / "one", passing(1))
    four, cold_four = verify(node, tmp_path / "four", passing(4))
    again, warm_four = verify(node, tmp_path / "four", passing(4))
    for summary, cells in ((one, 1), (four, 4), (again, 4)):
        assert dict(summary.outcomes) == {"pass": cells}
    # the three new builds are made in their one command each, as the warm reruns' cached ones
    # are; the resident runner takes them all on the one command it was started by
    further = 0 if runner == "resident" else 3
    assert cold_four - warm_one == further, (cold_one, warm_one, cold_four)
    assert warm_four - warm_one == further, (warm_one, warm_four)
    db = tmp_path / "four" / "results.db"
    rows = query(db, "SELECT stage_seconds, build_cached FROM results WHERE run_id = 2")
    assert len(rows) == 4 and all(r["build_cached"] for r in rows)
    # each stage keeps its own record and time, read from the node's clock
    assert all(set(json.loads(r["stage_seconds"])) == {"build", "inspect", "run"} for r in rows)
    assert all(json.loads(r["stage_seconds"])["run"] < 5 for r in rows)


def test_a_build_that_exits_0_without_its_binary_is_the_jobs_build_fail(
    node: SshNode, tmp_path: Path, runner: str
) -> None:
    """A job whose build writes no {binary} (a wrong -o, `build: true`): a kernel
    author's mistake, so build-fail (exit 1) with the reason, where it was infra
    ("the binary changed while it was copied", exit 4: the node blamed).
    Found by an adversarial review."""
    # names {binary} (a load's rule since review 107) yet writes none
    build = "test -f {sources} && test ! -e {binary}"
    variants = {"nobinary": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)}
    summary, _ = verify(node, tmp_path / "farm", variants)
    ((_, result, _),) = summary.results
    assert (result.verdict.outcome, result.verdict.failed_stage) == ("build-fail", "build"), result.verdict
    assert "wrote no binary" in result.verdict.reason and b"wrote no binary at" in result.build_log
    assert summary.exit_code == 1


def ran_marker(tmp_path: Path) -> Path:
    """A file a kernel touches to show it ran: in /dev/shm, since the python runners let
    a kernel write nothing outside its own work folder, /dev and /proc (there a touch
    elsewhere would fail, and `not marker.exists()` would hold whether it ran or not)."""
    marker = Path("/dev/shm") / f"farm-test-ran-{os.getpid()}-{tmp_path.name}"
    marker.unlink(missing_ok=True)
    return marker


def test_a_cell_missing_its_instructions_is_not_run_on_the_node(node: SshNode, tmp_path: Path) -> None:
    """The node holds the run back by its own count, as the farm would."""
    marker = ran_marker(tmp_path)
    variants = {
        "noinstr": standin_variant(
            "PASS", MIN75, "MIN_CC=75", instructions={"HGMMA": 1}, run=f"touch {marker} && {{binary}}"
        )
    }
    summary, _ = verify(node, tmp_path / "farm", variants)
    assert dict(summary.outcomes) == {"inspect-fail": 1}
    ((_, result, _),) = summary.results
    assert result.evidence.missing_instructions == {"HGMMA": (0, 1)}
    assert [s.name for s in result.stages][-1] == "inspect"
    assert not marker.exists()  # the node never started the kernel


def test_a_run_the_node_held_back_but_the_farm_judges_due_gets_its_own_trip(
    node: SshNode, tmp_path: Path, runner: str
) -> None:
    """The shell's count of "call call" by grep -o is 1 (the space between is taken by the
    first match); the farm's, 2. The farm's count decides: the cell runs, in a second command.
    The python runner counts as the farm does: one command."""

    def plain(needed: int) -> dict[str, dict[str, object]]:
        return {
            "plain": standin_variant(
                "PASS", MIN75, "MIN_CC=75", inspect="nvdisasm {binary}", instructions={"call": needed}
            )
        }

    # a disassembler of the node's that prints "call call" (an inspect must be a disassembler's)
    fake = node.node_bin / "nvdisasm"
    fake.write_text("#!/bin/sh\nprintf 'call call\\n'\n")
    fake.chmod(0o755)
    try:
        verify(node, tmp_path / "base", plain(1))  # ships the sources and builds
        baseline, base_commands = verify(node, tmp_path / "base", plain(1))
        summary, commands = verify(node, tmp_path / "pair", plain(2))
    finally:
        fake.unlink()
    assert dict(baseline.outcomes) == {"pass": 1}
    assert dict(summary.outcomes) == {"pass": 1}
    ((_, result, _),) = summary.results
    assert result.instruction_counts == {"call": 2}
    assert result.evidence.pass_line is not None
    assert commands == base_commands + (1 if runner == "shell" else 0), (base_commands, commands)


def test_a_node_without_the_kernel_driver_is_not_asked_through_python(node: SshNode, tmp_path: Path) -> None:
    """The probe's driver query (NVML: a python3 start per node) runs only where the
    kernel driver's /dev/nvidiactl is there: a stand-in card is not confirmed either way."""
    summary, _ = verify(node, tmp_path / "farm", passing(1))
    assert dict(summary.outcomes) == {"pass": 1}
    (snapshot,) = query(tmp_path / "farm" / "results.db", "SELECT driver_check, real_gpu FROM node_snapshots")
    assert not snapshot["real_gpu"]
    assert "no /dev/nvidiactl: the driver was not asked" in snapshot["driver_check"]


def test_every_process_of_a_cell_compiles_its_ptx_afresh(node: SshNode, tmp_path: Path, runner: str) -> None:
    """CUDA_CACHE_DISABLE=1 in the build's and the run's environment, whichever runner
    serves the cell: a JIT cache on the node would hand the kernel code the farm did not
    verify (written by any earlier process of the login), and would make a fresh
    machine's first run slower than its warm ones (a false perf-regression)."""
    wants = '[ "$CUDA_CACHE_DISABLE" = 1 ] && '
    build = wants + "g++ -O1 -DMODE_PASS -DMIN_CC=75 -o {binary} {sources}"
    variant = standin_variant("PASS", MIN75, "MIN_CC=75", build=build, run=wants + "{binary}")
    summary, _ = verify(node, tmp_path / "farm", {"jit": variant})
    assert dict(summary.outcomes) == {"pass": 1}, summary.results[0][1].verdict


FORGERS = Path(__file__).parent / "forgers"


def test_a_build_that_forges_the_later_stages_gets_its_own_verdict(node: SshNode, tmp_path: Path) -> None:
    """The build command prints, into the farm's own channel, the inspect and run a
    passing cell would send (frames with the command's token, read from its cmdline,
    and a line naming all three stages), then fails. The command's last line, from
    the shell's own variables after the cell's processes are reaped, names the
    build alone: the cell is build-fail, and its forged binary is remembered nowhere."""
    marker = ran_marker(tmp_path)
    forge = f"{sys.executable} {FORGERS / 'forge_stages.py'}"
    variants = {
        "forged": standin_variant(
            "BROKEN",
            MIN75,
            "MIN_CC=75",
            build=f"{forge} && g++ -O1 -DMODE_BROKEN -o {{binary}} {{sources}}",
            run=f"touch {marker} && {{binary}}",
        )
    }
    summary, _ = verify(node, tmp_path / "farm", variants)
    ((_, result, _),) = summary.results
    assert result.verdict is not None and result.verdict.outcome.value == "build-fail", result.verdict
    assert result.binary_sha256 is None and result.stdout.size == 0
    assert [s.name for s in result.stages] == ["build"]
    assert not marker.exists()


def test_a_kernel_flooding_the_farms_output_gets_no_verdict(node: SshNode, tmp_path: Path, runner: str) -> None:
    """A kernel writes 1 MiB into the stdout of the farm's outermost process on the
    node, forged status lines inside, then hangs past its 3 s timeout: text past the
    farm's cap is no evidence (infra-error), never the pass the forged lines claim.
    The python runners confine the kernel (Landlock): it may not open another
    process's descriptors, so there is no flood, and the kernel gets its own verdict
    (killed at its timeout); the resident runner's stream would also take only
    messages with its secret mark."""
    flood = tmp_path / "flood.sh"  # run by the kernel itself, before it passes
    flood.write_text(f"{sys.executable} {FORGERS / 'flood.py'}\n")
    hang = own_sleep(60)  # this test's alone: another session's run of it may be mid-kernel
    variants = {"flood": standin_variant("PASS", MIN75, "MIN_CC=75", prelude=flood, run="{binary}; " + hang, timeout=3)}
    summary, _ = verify(node, tmp_path / "farm", variants)
    ((_, result, _),) = summary.results
    assert result.verdict is not None
    if runner != "shell":
        assert result.verdict.outcome.value == "timeout", result.verdict
        assert result.evidence.run_timed_out and result.evidence.infra_stage is None
        assert "Permission denied" in (result.evidence.stderr_last_line or ""), result.evidence.stderr_last_line
    else:
        assert result.verdict.outcome.value == "infra-error", result.verdict
        assert "more than 1048576 bytes" in result.evidence.infra_detail
    assert not processes_matching(hang), "the kernel outlived its cell"


def test_a_forged_stage_clock_stays_with_its_cell(node: SshNode, tmp_path: Path) -> None:
    """A section clock of 30 digits (past any int64) printed by one cell's build is no
    internal error of the farm's: the node's other cells pass, the run exits 1 (build-fail)."""
    forge = f"FORGE_CLOCK=30 {sys.executable} {FORGERS / 'forge_stages.py'}"
    variants = {
        "clock": standin_variant("PASS", MIN75, "MIN_CC=75", build=f"{forge} {{sources}} {{binary}} && false"),
        "b": standin_variant("PASS", MIN75, "MIN_CC=75"),
        "c": standin_variant("PASS", MIN75, "MIN_CC=75"),
    }
    summary, _ = verify(node, tmp_path / "farm", variants)
    assert not summary.internal and summary.exit_code == 1
    assert dict(summary.outcomes) == {"build-fail": 1, "pass": 2}


def test_the_python_runner_runs_a_cell_without_helper_processes(node: SshNode, tmp_path: Path, runner: str) -> None:
    """The shell scripts start sha256sum, date, head and cut for every cell (hashes,
    clocks, frames); noderunner.py does all of that in its one process. Counted on
    the node by shims on its PATH: three more warm cells start none with python3."""
    calls = tmp_path / "calls.log"
    tools = ("sha256sum", "date", "head", "cut")
    for tool in tools:
        shim = node.node_bin / tool
        parent = '"$(tr "\\0" " " < /proc/$PPID/cmdline | /usr/bin/cut -c1-300)"'
        shim.write_text(f'#!/bin/sh\necho {tool} {parent} >> {calls}\nexec /usr/bin/{tool} "$@"\n')
        shim.chmod(0o755)

    def called() -> list[str]:  # none at all, where nothing started one
        return calls.read_text().splitlines() if calls.exists() else []

    try:
        counts = []
        for cells in (1, 4):
            verify(node, tmp_path / f"c{cells}", passing(cells))  # cold: builds
            before = len(called())

            summary, _ = verify(node, tmp_path / f"c{cells}", passing(cells))
            assert dict(summary.outcomes) == {"pass": cells}
            # the farm's own: started by its script or runner, not by a login's ~/.bashrc
            mine = [line for line in called()[before:] if "@@farm" in line or "farm-runner" in line]
            counts.append(len(mine))
    finally:
        for tool in tools:
            (node.node_bin / tool).unlink()
    per_cell = (counts[1] - counts[0]) / 3
    (snapshot,) = query(tmp_path / "c4" / "results.db", "SELECT runner FROM node_snapshots WHERE run_id = 2")
    if runner != "shell":
        assert per_cell == 0, counts
        # the interpreter itself, not a wrapper on PATH; said on the node's page
        assert snapshot["runner"].startswith("python3 /") and "shims" not in snapshot["runner"], snapshot["runner"]
    else:
        assert per_cell >= 8, counts
        assert snapshot["runner"] == "shell"


def test_the_connection_is_aes_gcm_both_ways_without_nagle(node: SshNode, tmp_path: Path) -> None:
    """paramiko checks AES-CTR's HMAC in Python, packet by packet (a fifth of the farm's
    SSH reader thread); AES-GCM's tag is checked inside the cipher. OpenSSH offers
    GCM, so the farm's connection to a real sshd must use it in both directions.
    And Nagle's algorithm is off: a command's open, exec, stdin and EOF are small
    messages in a row, and with Nagle on each command waited for the node's delayed
    ACK (bench/ssh_command.py: 89 ms against 3.2 ms per cell-shaped command). The
    farm's own delayed ACK is turned off before each read (sshd's Nagle held its
    messages behind it: 113 ms against 24 ms to connect and run a first command)."""
    with transport_for("t4", NodeSpec(**node.farm_entry(tmp_path / "work"))) as transport:
        assert isinstance(transport, SSHTransport)
        session = transport._conn.transport
        assert (session.local_cipher, session.remote_cipher) == ("aes128-gcm@openssh.com",) * 2
        assert session.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert isinstance(session.sock, QuickAck)
        assert transport.run("echo ok", timeout=30).stdout == "ok\n"


@pytest.mark.parametrize("inline", [True, False], ids=["stdin", "sftp"])
def test_bundles_ship_on_the_extracting_commands_stdin(
    node: SshNode, tmp_path: Path, inline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small bundles go on the stdin of the one command that extracts and checks them
    (a node 50 ms away paid half a second for SFTP's round trips); big ones by SFTP.
    Counted by sshd: the inline way starts one command and no SFTP session, and
    either way every bundle lands whole, its digest the node's own."""
    files = {}
    for name, text in (("a.cu", "// one\n"), ("include/b.h", "// two\n" * 500), ("c.txt", "")):
        path = tmp_path / "here" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[name] = path
    bundles = [Bundle.of_files("sources of k", dict(list(files.items())[:2])), Bundle.of_files("dep", files)]
    if not inline:
        monkeypatch.setattr(staging, "INLINE_BYTES", 0)
    work = tmp_path / "work"
    (work / "incoming").mkdir(parents=True)
    log = node.log.read_text(errors="replace")
    with transport_for("t4", NodeSpec(**node.farm_entry(work))) as transport:
        shipped, notes = staging.ship(transport, str(work), [(b, "") for b in bundles], tmp_path / "cache")
        digests = [staging.node_digest(transport, bundle.remote_dir(str(work), b)) for b in bundles]
    new = node.log.read_text(errors="replace")[len(log) :]
    assert shipped == sum(b.archive(tmp_path / "cache").stat().st_size for b in bundles) and notes == ""
    assert digests == [b.digest for b in bundles]
    assert list((work / "incoming").iterdir()) == []  # nothing left of the archives or the batch
    sftp = new.count("subsystem 'sftp'") + new.count("subsystem sftp")
    # the commands: the shipping (one), then node_digest's two
    assert (new.count("Starting session: command"), sftp) == ((3, 0) if inline else (3, 1)), new


def test_the_resident_runner_places_bundles_without_a_session_or_program_of_their_own(
    node: SshNode, tmp_path: Path
) -> None:
    """Staging through the node's resident runner: the files' bytes in one request,
    written, checked against the bundle's digest and renamed into place by the runner,
    which starts no program for it (tar, find and sha256sum were a dozen a node) and
    opens no session (sshd counts one: the runner's). An executable stays one; a copy
    there that was altered is replaced whole; a bundle whose bytes do not hash to its
    digest is refused, naming it, and leaves nothing behind."""
    here = tmp_path / "here"
    (here / "include").mkdir(parents=True)
    (here / "a.cu").write_text("// one\n")
    (here / "include" / "b.h").write_text("// two\n" * 500)
    (here / "tool").write_text("#!/bin/sh\necho tool\n")
    (here / "tool").chmod(0o755)
    sources = Bundle.of_files("sources of k", {"a.cu": here / "a.cu", "include/b.h": here / "include" / "b.h"})
    tools = Bundle.of_files("dependency tools", {"bin/tool": here / "tool"})
    empty = Bundle.of_files("dependency none", {})  # placed as an empty folder
    work = tmp_path / "work"
    work.mkdir()
    stale = Path(bundle.remote_dir(str(work), sources))
    stale.mkdir(parents=True)
    (stale / "a.cu").write_text("// altered\n")
    (stale / "planted").write_text("")
    log = node.log.read_text(errors="replace")
    with transport_for("t4", NodeSpec(**node.farm_entry(work))) as transport:
        runner = resident.ResidentRunner(transport.sibling(), "python3", Transport.open)
        try:
            shipped, notes = staging.place(runner, str(work), [(sources, "0" * 64), (tools, ""), (empty, "")])
            placed = node.log.read_text(errors="replace")[len(log) :]
            (here / "a.cu").write_text("// changed after it was hashed\n")
            changed = Bundle(sources.name, sources.files, "1" * 64, sources.size)
            with pytest.raises(StagingFailed, match=r"placing sources of k on t4 failed: sources of k: written digest"):
                staging.place(runner, str(work), [(changed, "")])
        finally:
            runner.close()
        digests = [staging.node_digest(transport, bundle.remote_dir(str(work), b)) for b in (sources, tools, empty)]
    assert placed.count("Starting session: command") == 1 and "subsystem" not in placed, placed
    assert shipped == sources.size + tools.size and "sources of k: the copy on the node was altered" in notes
    assert digests == [sources.digest, tools.digest, empty.digest]
    assert not (stale / "planted").exists() and (stale / "a.cu").read_text() == "// one\n"
    tool = Path(bundle.remote_dir(str(work), tools)) / "bin" / "tool"
    assert os.access(tool, os.X_OK) and not os.access(stale / "a.cu", os.X_OK)
    assert sorted(p.name for p in (work / "bundles").iterdir()) == sorted([sources.digest, tools.digest, empty.digest])


@pytest.mark.parametrize("placer", ["runner", "script"])
def test_a_dead_placers_leftovers_are_swept_by_the_next_placing(node: SshNode, tmp_path: Path, placer: str) -> None:
    """A placer killed mid-placing leaves FOLDER.part.PID (or .old.PID) beside the bundle's
    place, which only a placer of the same pid removed. The next placing sweeps those of
    pids no longer alive that were untouched for an hour; a live pid's, or a fresh one
    (another machine sharing the folder may be placing it), stays."""
    import subprocess
    import time

    (tmp_path / "a.cu").write_text("// one\n")
    sources = Bundle.of_files("sources of k", {"a.cu": tmp_path / "a.cu"})
    work = tmp_path / "work"
    (work / "incoming").mkdir(parents=True)
    final = bundle.remote_dir(str(work), sources)
    Path(final).parent.mkdir(parents=True, exist_ok=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    hours_ago = time.time() - 2 * 3600
    planted = {
        "part-dead-old": (f"{final}.part.{gone.pid}", hours_ago),
        "old-dead-old": (f"{final}.old.{gone.pid}", hours_ago),
        "part-alive-old": (f"{final}.part.{os.getpid()}", hours_ago),
        "part-dead-fresh": (f"{final}.part.{gone.pid + 1000000}", time.time()),
    }
    # names any process of the login may make: no pid, or none that fits one, stay
    planted.update(
        {
            "not-a-pid": (f"{final}.part.abc", hours_ago),
            "unicode-digit": (f"{final}.part.\u00b2", hours_ago),
            "too-big": (f"{final}.part.99999999999", hours_ago),
        }
    )
    for path, when in planted.values():
        Path(path).mkdir()
        (Path(path) / "half").write_text("written")
        os.utime(path, (when, when))
    # a leftover that is a link to a folder elsewhere: the link goes, never what it names
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the farm's")
    link = Path(f"{final}.old.{gone.pid}")
    os.replace(planted.pop("old-dead-old")[0], tmp_path / "moved")  # the name is the link's now
    link.symlink_to(outside)
    os.utime(link, (hours_ago, hours_ago), follow_symlinks=False)
    with transport_for("t4", NodeSpec(**node.farm_entry(work))) as transport:
        if placer == "runner":
            runner = resident.ResidentRunner(transport.sibling(), "python3", Transport.open)
            try:
                staging.place(runner, str(work), [(sources, "")])
            finally:
                runner.close()
        else:
            staging.ship(transport, str(work), [(sources, "")], tmp_path / "cache")
        assert staging.node_digest(transport, final) == sources.digest
    left = {name for name, (path, _) in planted.items() if os.path.lexists(path)}
    assert left == {"part-alive-old", "part-dead-fresh", "not-a-pid", "unicode-digit", "too-big"}
    assert not os.path.lexists(link) and (outside / "keep").read_text() == "not the farm's"


def test_a_node_behind_a_jump_host(node: SshNode, tmp_path: Path) -> None:
    """farm.yaml's `jump:` (a bastion, as OpenSSH's ProxyJump): the node is reached
    through a channel of the bastion's own connection, both with strict host keys
    (one known_hosts holds both), and the cell passes as it would directly. The
    bastion's connection is the socket: Nagle and the delayed ACK are off there."""
    fleet = Fleet(tmp_path / "bastion")
    bastion = fleet.add("bastion", None, start=False)
    bastion.authorized_keys.write_text(node.client_key.with_suffix(".pub").read_text())
    bastion.start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(node.known_hosts_line() + "\n" + bastion.known_hosts_line() + "\n")
        entry = node.farm_entry(
            tmp_path / "work", known_hosts=str(known), jump=f"{bastion.user}@127.0.0.1:{bastion.port}"
        )
        # the bastion's key is checked as strictly as the node's: unknown, refused, nothing run
        only_node = tmp_path / "only_node"
        only_node.write_text(node.known_hosts_line() + "\n")
        with pytest.raises(HostKeyError, match=f"{bastion.port}"):
            transport_for("t4", NodeSpec(**{**entry, "known_hosts": str(only_node)})).open()
        with transport_for("t4", NodeSpec(**entry)) as transport:
            assert isinstance(transport, SSHTransport)
            assert transport.run("echo $SSH_CONNECTION", timeout=30).stdout.split()[0] == "127.0.0.1"
            gateway = transport._conn.gateway.transport
            assert isinstance(gateway.sock, QuickAck)
            assert gateway.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        root = tmp_path / "farm"
        farm_file = write_farm(root, {"t4": entry}, [standin_job("standin", passing(1))])
        farm = load_farm(farm_file)
        store = Store(farm.database_url)
        try:
            summary = run_cells(farm, store, plan_cells(farm, None, None), cache_dir=tmp_path / "cache")
        finally:
            store.close()
        assert dict(summary.outcomes) == {"pass": 1}, [r.verdict for _, r, _ in summary.results]
        # both connections (the one above, the run's) authenticated at the bastion first
        log = bastion.log.read_text(errors="replace")
        assert log.count("Accepted publickey") == 2, log[-2000:]
    finally:
        fleet.stop()


def test_a_shipment_the_node_refuses_early_says_why(node: SshNode, tmp_path: Path) -> None:
    """An archive bigger than the channel's window (2 MiB) that the node stops reading
    at once (here `incoming` is a file, as a full disk would stop it): the farm's
    sending fails, and the command's own exit and stderr still say why; a staging
    failure of the node, not a lost session."""
    big = tmp_path / "here" / "big.bin"
    big.parent.mkdir(parents=True)
    big.write_bytes(os.urandom(3 << 20))  # incompressible: a 3 MiB archive
    shipment = Bundle.of_files("sources of big", {"big.bin": big})
    work = tmp_path / "work"
    work.mkdir()
    (work / "incoming").write_text("not a folder")
    with transport_for("t4", NodeSpec(**node.farm_entry(work))) as transport:
        assert shipment.archive(tmp_path / "cache").stat().st_size > 2 << 20
        with pytest.raises(StagingFailed, match=r"Not a directory|Directory nonexistent"):  # bash, dash (/bin/sh)
            staging.ship(transport, str(work), [(shipment, "")], tmp_path / "cache")
        assert transport.run("echo still here", timeout=30).stdout == "still here\n"


def test_a_nodes_recorded_binaries_are_read_once_for_all_its_cells(
    node: SshNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What each cached build must hash to is read for all of a node's cells at its
    start (one query; from a worker process, one round trip to the parent), not per
    cell: the warm run asks recorded_binary nothing, and still checks every cached
    binary against what the cold run recorded."""
    verify(node, tmp_path / "farm", passing(3))
    db = tmp_path / "farm" / "results.db"
    recorded = {r["build_key"]: r["binary_sha256"] for r in query(db, "SELECT build_key, binary_sha256 FROM results")}
    store = Store(f"sqlite:///{db}")
    try:
        assert store.recorded_binaries("t4", [*recorded, "no-such-key"]) == {**recorded, "no-such-key": None}
        assert all(store.recorded_binary("t4", key) == sha for key, sha in recorded.items())
    finally:
        store.close()

    def per_cell(*_args: object) -> None:
        raise AssertionError("a cell asked the store for its recorded binary")

    monkeypatch.setattr(Store, "recorded_binary", per_cell)
    summary, _ = verify(node, tmp_path / "farm", passing(3))
    assert dict(summary.outcomes) == {"pass": 3}
    rows = query(db, "SELECT build_cached, binary_sha256, build_key FROM results WHERE run_id = 2")
    assert all(r["build_cached"] and r["binary_sha256"] == recorded[r["build_key"]] for r in rows)


def test_a_host_compiler_replaced_on_the_node_rebuilds_what_it_built(node: SshNode, tmp_path: Path) -> None:
    """The build key names the host compilers' files (the probe's `compilers`): a g++ replaced
    under the same name on the node's PATH (an upgrade) makes its builds again; an unchanged
    one reuses them."""
    wrapper = node.node_bin / "g++"
    try:
        wrapper.write_text('#!/bin/sh\n# g++ 1\nexec /usr/bin/g++ "$@"\n')
        wrapper.chmod(0o755)
        first, _ = verify(node, tmp_path / "farm", passing(1))
        again, _ = verify(node, tmp_path / "farm", passing(1))
        wrapper.write_text('#!/bin/sh\n# g++ 1.1, upgraded\nexec /usr/bin/g++ "$@"\n')
        upgraded, _ = verify(node, tmp_path / "farm", passing(1))
    finally:
        wrapper.unlink(missing_ok=True)
    for summary in (first, again, upgraded):
        assert dict(summary.outcomes) == {"pass": 1}
    rows = query(tmp_path / "farm" / "results.db", "SELECT build_cached, build_key FROM results ORDER BY run_id")
    assert [r["build_cached"] for r in rows] == [0, 1, 0]
    assert rows[0]["build_key"] == rows[1]["build_key"] != rows[2]["build_key"]


def test_a_host_compiler_rewritten_with_its_size_and_time_put_back_rebuilds(node: SshNode, tmp_path: Path) -> None:
    """A compiler rewritten in place with its size kept and its modification time put back
    (`touch -d`, a package tool restoring times) is still another compiler: the key names the
    file's change time, which no user can set. With only size and time it reused the build
    the old g++ made."""
    wrapper = node.node_bin / "g++"
    try:
        wrapper.write_text('#!/bin/sh\n# g++ A\nexec /usr/bin/g++ "$@"\n')
        wrapper.chmod(0o755)
        first, _ = verify(node, tmp_path / "farm", passing(1))
        held = wrapper.stat()
        while int(time.time()) <= int(held.st_ctime):  # the key has the change time in seconds
            time.sleep(0.05)
        wrapper.write_text('#!/bin/sh\n# g++ B\nexec /usr/bin/g++ "$@"\n')  # the same size, the same inode
        os.utime(wrapper, ns=(held.st_atime_ns, held.st_mtime_ns))
        assert (wrapper.stat().st_size, wrapper.stat().st_mtime_ns) == (held.st_size, held.st_mtime_ns)
        rewritten, _ = verify(node, tmp_path / "farm", passing(1))
    finally:
        wrapper.unlink(missing_ok=True)
    assert [dict(s.outcomes) for s in (first, rewritten)] == [{"pass": 1}, {"pass": 1}]
    rows = query(tmp_path / "farm" / "results.db", "SELECT build_cached, build_key FROM results ORDER BY run_id")
    assert [r["build_cached"] for r in rows] == [0, 0]
    assert rows[0]["build_key"] != rows[1]["build_key"]


def test_a_nodes_env_changed_in_farm_yaml_rebuilds_what_it_built(node: SshNode, tmp_path: Path) -> None:
    """The node's `env:` in farm.yaml reaches every build (nvcc reads NVCC_APPEND_FLAGS,
    NVCC_PREPEND_FLAGS and NVCC_CCBIN, the host compiler CPATH and the like; a build command may
    read its own): a build made under another env is another binary. The key did not name it, so a
    build made while the env said -DMODE_PASS was reused, and passed, after it said
    -DMODE_FAILNUM, whose build fails its numbers (a red-team finding)."""
    build = "g++ -O1 $STANDIN_MODE -DMIN_CC=75 -o {binary} {sources}"
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)}
    root = tmp_path / "farm"
    outcomes = []
    for mode in ("-DMODE_PASS", "-DMODE_FAILNUM"):
        summary, _ = verify(node, root, variants, env={"STANDIN_MODE": mode})
        outcomes.append(dict(summary.outcomes))
    rows = query(root / "results.db", "SELECT build_cached, build_key FROM results ORDER BY run_id")
    assert outcomes == [{"pass": 1}, {"fail": 1}], outcomes
    assert [r["build_cached"] for r in rows] == [0, 0]
    assert rows[0]["build_key"] != rows[1]["build_key"]


def test_a_build_writes_only_in_its_own_folder(node: SshNode, tmp_path: Path, runner: str) -> None:
    """A build runs confined (Landlock) to its build folder and its own $TMPDIR: a build of one
    job could otherwise swap another cell's copy of its binary between the copy's hash and its
    start (a red-team finding). Its compiler still works there; a write beside its folder fails.
    The shell scripts (nodes without python3) confine nothing, and say so for the run."""
    build = "touch ../escaped-{i}; g++ -O1 -DMODE_PASS -DMIN_CC=75 -DV={i} -o {{binary}} {{sources}}"
    variants = {"p0": standin_variant("PASS", MIN75, "MIN_CC=75", build=build.format(i=0))}
    summary, _ = verify(node, tmp_path / "farm", variants)
    assert dict(summary.outcomes) == {"pass": 1}
    escaped = list((tmp_path / "work").rglob("escaped-*"))
    assert bool(escaped) == (runner == "shell"), escaped
    log = query(tmp_path / "farm" / "results.db", "SELECT build_log FROM results")[0]["build_log"]
    if runner != "shell":
        assert b"Permission denied" in bytes(log), log


def test_a_build_failing_on_a_refused_write_says_where_a_build_may_write(
    node: SshNode, tmp_path: Path, runner: str
) -> None:
    """A build whose write outside its folder was refused, and that fails on it, is build-fail
    with a reason that says why: it ran confined, and where a build may write. A job author
    read only "the build exit 1" and "Permission denied" in the log. The shell scripts
    confine nothing: there the write succeeds and the build passes."""
    build = "touch ../escaped-x && g++ -O1 -DMODE_PASS -DMIN_CC=75 -o {binary} {sources}"
    summary, _ = verify(node, tmp_path / "farm", {"p0": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)})
    row = query(tmp_path / "farm" / "results.db", "SELECT outcome, reason, build_log FROM results")[0]
    if runner == "shell":
        assert dict(summary.outcomes) == {"pass": 1}, row["reason"]
        return
    assert row["outcome"] == "build-fail", row["reason"]
    assert "ran confined" in row["reason"] and "its own build folder" in row["reason"], row["reason"]
    assert b"[farm] it ran confined" in bytes(row["build_log"]), row["build_log"]


def test_a_build_failing_otherwise_gets_no_confinement_hint(node: SshNode, tmp_path: Path) -> None:
    """A build that fails for its own reasons (a compile error) says nothing of confinement."""
    build = "g++ -O1 -DMODE_PASS -DMIN_CC=75 -include no-such-header.h -o {binary} {sources}"
    summary, _ = verify(node, tmp_path / "farm", {"p0": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)})
    row = query(tmp_path / "farm" / "results.db", "SELECT outcome, reason FROM results")[0]
    assert dict(summary.outcomes) == {"build-fail": 1}, row["reason"]
    assert "confined" not in row["reason"], row["reason"]


def test_a_build_log_made_a_link_sends_back_nothing_it_names(node: SshNode, tmp_path: Path) -> None:
    """A build may replace its build.log (it writes its own folder): made a link, the file it
    names (any file of the node's user) was sent back as the build's log, onto the cell's page (a
    red-team finding). No runner reads a link back."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CONTENT of the node's user\n")
    build = f"rm -f build.log; ln -s {secret} build.log; g++ -O1 -DMODE_PASS -DMIN_CC=75 -o {{binary}} {{sources}}"
    summary, _ = verify(node, tmp_path / "farm", {"p0": standin_variant("PASS", MIN75, "MIN_CC=75", build=build)})
    assert dict(summary.outcomes) == {"pass": 1}
    log = bytes(query(tmp_path / "farm" / "results.db", "SELECT build_log FROM results")[0]["build_log"])
    assert b"SECRET-CONTENT" not in log, log
