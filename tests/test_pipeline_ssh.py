"""The whole pipeline over real OpenSSH, with strict host keys; only the GPU is
a stand-in.

One farm run (module-scoped) sends 30 cells to eleven farm nodes served by the
loopback sshd fleet of conftest.py, and every outcome the farm can give a cell
(all but not-run) is asserted in the results database it wrote. A warm rerun
then checks that nothing is shipped and unchanged cells are not rebuilt.

Nodes of the farm (several may share one sshd):

    t4, a100, h100, nogpu   their own sshd, stand-in card (or none)
    drift     a T4 machine of its own, but farm.yaml declares CC 8.0 (an A100): probe drift
              (on t4's sshd it would be one card under two names, run under one: card_claims.py)
    down      a port where sshd was stopped
    frozen    an sshd that is SIGSTOPped: TCP connects, no banner ever comes
    stranger  a100's sshd with a known_hosts that lacks a100's key
    impostor  h100's sshd with a known_hosts holding another key for it
    nonvcc    a100's sshd, with an nvcc path that does not exist
    spaced    an H100 machine of its own, with a work folder whose path has a space
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from nodes import CARDS, Fleet, processes_matching, query, standin_job, standin_variant

from orchestrator.config.farm import Farm, load_farm
from orchestrator.errors import EXIT_INFRA, EXIT_OK, EXIT_UNEXPECTED
from orchestrator.outcomes import Outcome
from orchestrator.plan import plan_cells
from orchestrator.run.scheduler import run_cells
from orchestrator.run.summary import RunSummary
from orchestrator.store.database import Store

KERNEL = "standin"
HANG_TIMEOUT = 3

MIN75 = {"min": "7.5"}
MIN80 = {"min": "8.0"}
EXACT90 = {"exactly": "9.0"}
KNOWN_BUILD_FAIL = [
    {
        "when": {"nvcc": ">=13.0"},
        "outcome": "build-fail",
        "reason": "the stand-in's MODE_BROKEN does not compile (declared for the test)",
    }
]

VARIANTS = {
    "min75": standin_variant("PASS", MIN75, "MIN_CC=75"),
    "ampere": standin_variant("PASS", MIN80, "MIN_CC=80"),
    "hopper": standin_variant("PASS", EXACT90, "EXACT_CC=90"),
    "failnum": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
    "crash": standin_variant("CRASH", MIN75, "MIN_CC=75"),
    "wronggate": standin_variant("WRONGGATE", MIN75, "MIN_CC=75"),
    "nogate": standin_variant("NOGATE", EXACT90),
    "hang": standin_variant("HANG", MIN75, "MIN_CC=75", timeout=HANG_TIMEOUT),
    "broken": standin_variant("BROKEN", MIN75),
    "noinstr": standin_variant("PASS", MIN75, "MIN_CC=75", instructions={"HGMMA": 1}),
    "knownbad": standin_variant("BROKEN", MIN75, known_failures=KNOWN_BUILD_FAIL),
    "fixedbuild": standin_variant("PASS", MIN75, "MIN_CC=75", known_failures=KNOWN_BUILD_FAIL),
}

# (node, variant) -> (expected, outcome) of the first run.
TABLE: dict[tuple[str, str], tuple[str, str]] = {
    ("t4", "min75"): ("pass", "pass"),
    ("t4", "ampere"): ("expected-refusal", "expected-refusal"),
    ("t4", "hopper"): ("expected-refusal", "expected-refusal"),
    ("t4", "failnum"): ("pass", "fail"),
    ("t4", "crash"): ("pass", "fail"),
    ("t4", "wronggate"): ("pass", "unexpected-refusal"),
    ("t4", "nogate"): ("expected-refusal", "missing-refusal"),
    ("t4", "hang"): ("pass", "timeout"),
    ("t4", "broken"): ("pass", "build-fail"),
    ("t4", "noinstr"): ("pass", "inspect-fail"),
    ("t4", "knownbad"): ("known-failure", "known-failure"),
    ("t4", "fixedbuild"): ("known-failure", "fixed"),
    ("a100", "min75"): ("pass", "pass"),
    ("a100", "ampere"): ("pass", "pass"),
    ("a100", "hopper"): ("expected-refusal", "expected-refusal"),
    ("a100", "wronggate"): ("pass", "pass"),  # the off-by-one gate only refuses 7.5
    ("h100", "min75"): ("pass", "pass"),
    ("h100", "hopper"): ("pass", "pass"),
    ("h100", "nogate"): ("pass", "pass"),
    ("nogpu", "min75"): ("compile-only", "compile-only"),
    ("nogpu", "hopper"): ("compile-only", "compile-only"),
    ("nogpu", "noinstr"): ("compile-only", "inspect-fail"),
    ("drift", "ampere"): ("expected-refusal", "expected-refusal"),  # judged on 7.5, not 8.0
    ("drift", "min75"): ("pass", "pass"),
    ("down", "min75"): ("pass", "infra-error"),
    ("stranger", "min75"): ("pass", "infra-error"),
    ("impostor", "min75"): ("pass", "infra-error"),
    ("frozen", "min75"): ("pass", "infra-error"),
    ("nonvcc", "min75"): ("pass", "infra-error"),
}
# Cells of the first run that test one thing each, outside the table.
EXTRA: dict[tuple[str, str], str] = {
    ("spaced", "min75"): "pass",
}


@dataclass
class FarmRunResult:
    root: Path
    farm: Farm
    fleet: Fleet
    summary: RunSummary
    seconds: float

    @property
    def db(self) -> Path:
        return self.root / "results.db"

    def workdir(self, node: str) -> Path:
        return self.root / f"work-{node}"

    def port(self, node: str) -> int:
        host = {"drift": "pipeline-drift", "stranger": "a100", "impostor": "h100", "nonvcc": "a100"}
        return self.fleet[host.get(node, node)].port


def result_row(run: FarmRunResult, node: str, variant: str) -> sqlite3.Row:
    rows = query(
        run.db,
        "SELECT * FROM results WHERE run_id = ? AND node = ? AND kernel = ? AND variant = ?",
        run.summary.run_id,
        node,
        KERNEL,
        variant,
    )
    label = f"{KERNEL}:{variant}@{node}"
    assert len(rows) == 1, f"{label}: {len(rows)} rows in run {run.summary.run_id}"
    return rows[0]


def snapshot_row(run: FarmRunResult, node: str) -> sqlite3.Row:
    rows = query(
        run.db,
        "SELECT * FROM node_snapshots WHERE run_id = ? AND node = ?",
        run.summary.run_id,
        node,
    )
    assert len(rows) == 1, f"{node}: {len(rows)} snapshots in run {run.summary.run_id}"
    return rows[0]


def cells_for(farm: Farm, table: dict[tuple[str, str], object]) -> list:
    by_node: dict[str, list[str]] = {}
    for node, variant in table:
        by_node.setdefault(node, []).append(f"{KERNEL}:{variant}")
    cells = []
    for node, selectors in by_node.items():
        cells += plan_cells(farm, selectors, [node])
    return cells


def run_farm(root: Path, farm: Farm, cells: list) -> tuple[RunSummary, float]:
    store = Store(farm.database_url)
    try:
        clock = time.monotonic()
        summary = run_cells(farm, store, cells, cache_dir=root / "archives", trigger="test")
        return summary, time.monotonic() - clock
    finally:
        store.close()


@pytest.fixture(scope="module")
def first_run(
    ssh_fleet: Fleet, make_farm: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> FarmRunResult:
    root = tmp_path_factory.mktemp("farm")
    fleet = ssh_fleet
    assert not fleet["down"].accepts(), "the stopped node's port must have no sshd"

    # A known_hosts with other nodes' keys, but not a100's.
    stranger_hosts = root / "stranger_known_hosts"
    stranger_hosts.write_text(f"{fleet['t4'].known_hosts_line()}\n{fleet['h100'].known_hosts_line()}\n")
    # h100's address, listed with t4's host key: a changed key.
    impostor_hosts = root / "impostor_known_hosts"
    impostor_hosts.write_text(fleet["h100"].known_hosts_line(fleet["t4"].host_public_key) + "\n")

    def wd(node: str) -> Path:
        return root / f"work-{node}"

    # machines of their own: a card reached under two node names runs under one (run/card_claims.py)
    for machine, card in (("pipeline-drift", CARDS["t4"]), ("pipeline-spaced", CARDS["h100"])):
        if machine not in fleet.nodes:
            fleet.add(machine, card)

    nodes = {
        "t4": fleet["t4"].farm_entry(wd("t4")),
        "a100": fleet["a100"].farm_entry(wd("a100")),
        "h100": fleet["h100"].farm_entry(wd("h100")),
        "nogpu": fleet["nogpu"].farm_entry(wd("nogpu")),
        "drift": fleet["pipeline-drift"].farm_entry(wd("drift"), gpu="NVIDIA A100-SXM4-40GB", cc="8.0"),
        "down": fleet["down"].farm_entry(wd("down"), connect_timeout=5),
        "stranger": fleet["a100"].farm_entry(wd("stranger"), known_hosts=str(stranger_hosts)),
        "impostor": fleet["h100"].farm_entry(wd("impostor"), known_hosts=str(impostor_hosts)),
        "frozen": fleet["frozen"].farm_entry(wd("frozen"), connect_timeout=2),
        "nonvcc": fleet["a100"].farm_entry(wd("nonvcc"), nvcc="/usr/local/bin/no-such-nvcc"),
        "spaced": fleet["pipeline-spaced"].farm_entry(root / "work spaced"),
    }
    farm = load_farm(make_farm(root, nodes, [standin_job(KERNEL, VARIANTS)]))
    assert farm.database_url == f"sqlite:///{root / 'results.db'}"
    cells = cells_for(farm, {**TABLE, **EXTRA})
    assert len(cells) == len(TABLE) + len(EXTRA)
    summary, seconds = run_farm(root, farm, cells)
    return FarmRunResult(root, farm, fleet, summary, seconds)


# ------------------------------------------------------------ the first run


@pytest.mark.parametrize(("node", "variant"), list(TABLE), ids=[f"{v}@{n}" for n, v in TABLE])
def test_cell_outcome_in_database(first_run: FarmRunResult, node: str, variant: str) -> None:
    expected, outcome = TABLE[(node, variant)]
    row = result_row(first_run, node, variant)
    assert (row["expected"], row["outcome"]) == (expected, outcome), (
        f"{KERNEL}:{variant}@{node}: stored expected/outcome {row['expected']}/{row['outcome']} "
        f"(reason: {row['reason']!r}; stderr: {bytes(row['stderr'])[-300:]!r}; "
        f"build log: {bytes(row['build_log'])[-300:]!r})"
    )


def test_every_outcome_but_not_run_is_produced(first_run: FarmRunResult) -> None:
    rows = query(
        first_run.db,
        "SELECT DISTINCT outcome FROM results WHERE run_id = ?",
        first_run.summary.run_id,
    )
    produced = {r["outcome"] for r in rows}
    # perf-regression needs five earlier runs of a cell: tests/test_metrics.py makes one on this fleet;
    # sanitizer-error needs the compute-sanitizer stand-in on a node: tests/test_sanitize.py makes them
    left = {Outcome.NOT_RUN.value, Outcome.PERF_REGRESSION.value, Outcome.SANITIZER_ERROR.value}
    assert produced == {o.value for o in Outcome} - left


def test_summary_matches_database_and_exits_unexpected(first_run: FarmRunResult) -> None:
    s = first_run.summary
    rows = query(
        first_run.db,
        "SELECT outcome, COUNT(*) AS n FROM results WHERE run_id = ? GROUP BY outcome",
        s.run_id,
    )
    assert dict(s.outcomes) == {r["outcome"]: r["n"] for r in rows}
    assert s.exit_code == EXIT_UNEXPECTED == 1
    (run,) = query(first_run.db, "SELECT * FROM runs WHERE id = ?", s.run_id)
    assert (run["status"], run["exit_code"], run["trigger"]) == ("finished", 1, "test")
    assert run["config_file"] == str(first_run.farm.file)


def test_first_run_ships_sources_and_builds(first_run: FarmRunResult) -> None:
    assert first_run.summary.bytes_shipped > 0
    for node in ("t4", "a100", "h100", "nogpu", "drift"):
        snap = snapshot_row(first_run, node)
        assert snap["bytes_shipped"] > 0, node
        assert snap["probe_error"] is None, (node, snap["probe_error"])
        assert snap["nvcc_version"] == "13.0.88", node
        user = first_run.fleet["t4"].user
        assert snap["address"] == f"{user}@127.0.0.1:{first_run.port(node)}", node
    row = result_row(first_run, "t4", "min75")
    assert not row["build_cached"]
    assert json.loads(row["stage_details"])["build"]["status"] == "ok"
    # the bundle and the build are on the node, under its own work folder
    assert any(first_run.workdir("t4").glob(f"bundles/*/kernels/{KERNEL}.cpp"))
    command = shlex.split(row["build_command"])
    assert Path(command[command.index("-o") + 1]).is_file()


def test_pass_cell_evidence(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "t4", "min75")
    assert row["exit_code"] == 0
    assert row["failed_stage"] is None
    assert b"standin: PASS" in bytes(row["stdout"])
    assert b"standin: device CC 7.5" in bytes(row["stdout"])
    assert row["stdout_size"] == len(bytes(row["stdout"]))
    assert json.loads(row["instruction_counts"])["call"] >= 1
    assert json.loads(row["required_instructions"]) == {"call": 1}
    assert re.fullmatch(r"[0-9a-f]{64}", row["binary_sha256"] or "")
    assert row["build_command"].startswith("g++ -O1 -DMODE_PASS -DMIN_CC=75 -o ")
    assert row["contract"] == "CC >= 7.5"


def test_per_stage_durations_are_stored(first_run: FarmRunResult) -> None:
    for node, variant in [("t4", "min75"), ("h100", "hopper"), ("t4", "failnum")]:
        seconds = json.loads(result_row(first_run, node, variant)["stage_seconds"])
        assert set(seconds) == {"build", "inspect", "run"}, (node, variant, seconds)
        assert all(isinstance(v, float | int) and v >= 0 for v in seconds.values())
    compile_only = json.loads(result_row(first_run, "nogpu", "min75")["stage_seconds"])
    assert set(compile_only) == {"build", "inspect"}
    build_fail = json.loads(result_row(first_run, "t4", "broken")["stage_seconds"])
    assert set(build_fail) == {"build"}
    assert first_run.summary.stage_seconds["build"] > 0
    assert first_run.summary.stage_seconds["run"] > 0


def test_refusals(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "t4", "hopper")
    assert row["exit_code"] == 1
    assert row["failed_stage"] is None
    assert b"standin needs CC 9.0 and this device is 7.5" in bytes(row["stderr"])
    assert b"PASS" not in bytes(row["stdout"])

    unexpected = result_row(first_run, "t4", "wronggate")
    assert unexpected["failed_stage"] == "run"
    assert unexpected["exit_code"] == 1
    assert b"standin needs CC 7.5 and this device is 7.5" in bytes(unexpected["stderr"])

    missing = result_row(first_run, "t4", "nogate")
    assert missing["failed_stage"] == "run"
    assert missing["exit_code"] == 0
    assert b"standin: PASS" in bytes(missing["stdout"])
    assert "must refuse" in missing["reason"]


def test_failures_keep_their_evidence(first_run: FarmRunResult) -> None:
    wrong = result_row(first_run, "t4", "failnum")
    assert (wrong["failed_stage"], wrong["exit_code"]) == ("run", 1)
    assert b"mismatch at element 17" in bytes(wrong["stderr"])

    crash = result_row(first_run, "t4", "crash")
    assert crash["failed_stage"] == "run"
    assert crash["exit_code"] == 128 + 6, "abort() is SIGABRT: the shell's status 134"
    assert b"standin: device CC 7.5" in bytes(crash["stdout"])


def test_build_fail_and_inspect_fail(first_run: FarmRunResult) -> None:
    broken = result_row(first_run, "t4", "broken")
    assert broken["failed_stage"] == "build"
    assert broken["exit_code"] is None, "a cell that never ran has no exit code"
    assert b"#error" in bytes(broken["build_log"])
    assert b"MODE_BROKEN" in bytes(broken["build_log"])
    assert broken["binary_sha256"] is None

    for node in ("t4", "nogpu"):
        row = result_row(first_run, node, "noinstr")
        assert row["failed_stage"] == "inspect", node
        assert "HGMMA" in row["reason"], node
        assert json.loads(row["instruction_counts"]) == {"HGMMA": 0}, node
        assert row["exit_code"] is None, node


def test_timeout_kills_the_kernel_on_the_node(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "t4", "hang")
    assert row["failed_stage"] == "run"
    assert row["exit_code"] in (124, 137)
    assert b"standin: device CC 7.5" in bytes(row["stdout"]), "it did start before hanging"
    run_seconds = json.loads(row["stage_seconds"])["run"]
    assert HANG_TIMEOUT <= run_seconds < HANG_TIMEOUT + 15
    # The stand-in and the child it forked must both be gone from the machine.
    binary = f"{first_run.workdir('t4')}/builds/t4/{KERNEL}-hang-"
    assert binary in row["build_command"]
    left = processes_matching(binary)
    assert not left, f"timed-out stand-in processes left running: {left}"


def test_compile_only_node(first_run: FarmRunResult) -> None:
    snap = snapshot_row(first_run, "nogpu")
    assert (snap["gpu_name"], snap["cc"], snap["gpu_count"]) == (None, None, 0)
    assert snap["probe_error"] is None
    assert "rc=127" in snap["smi_output"]
    row = result_row(first_run, "nogpu", "min75")
    assert row["exit_code"] is None
    assert row["failed_stage"] is None
    assert bytes(row["stdout"]) == b""
    assert re.fullmatch(r"[0-9a-f]{64}", row["binary_sha256"] or "")


def test_known_failure_and_fixed(first_run: FarmRunResult) -> None:
    known = result_row(first_run, "t4", "knownbad")
    assert known["failed_stage"] == "build"
    assert "MODE_BROKEN does not compile" in known["known_failure_reason"]
    assert known["reason"].startswith("known failure:")

    fixed = result_row(first_run, "t4", "fixedbuild")
    assert fixed["failed_stage"] is None
    assert fixed["known_failure_reason"] is not None
    assert b"standin: PASS" in bytes(fixed["stdout"])
    assert "remove the declaration" in fixed["reason"]


def test_probed_snapshots(first_run: FarmRunResult) -> None:
    cards = {
        "t4": ("Tesla T4", "7.5", "15360 MiB"),
        "a100": ("NVIDIA A100-SXM4-40GB", "8.0", "40960 MiB"),
        "h100": ("NVIDIA H100 80GB HBM3", "9.0", "81559 MiB"),
    }
    for node, (gpu, cc, memory) in cards.items():
        snap = snapshot_row(first_run, node)
        assert (snap["gpu_name"], snap["cc"], snap["memory"]) == (gpu, cc, memory), node
        assert (snap["driver"], snap["gpu_count"]) == ("550.54.15", 1), node
        assert (snap["declared_gpu"], snap["declared_cc"]) == (gpu, cc), node
        assert not snap["cc_mismatch"], node
        assert snap["transport"] == "ssh"
        assert snap["hostname"], node


def test_probe_drift_judges_the_probed_card(first_run: FarmRunResult) -> None:
    snap = snapshot_row(first_run, "drift")
    assert snap["cc_mismatch"] == 1
    assert (snap["cc"], snap["declared_cc"]) == ("7.5", "8.0")
    assert (snap["gpu_name"], snap["declared_gpu"]) == ("Tesla T4", "NVIDIA A100-SXM4-40GB")
    row = result_row(first_run, "drift", "ampere")
    assert "CC 7.5" in row["expected_reason"], row["expected_reason"]
    assert b"standin needs CC 8.0 and this device is 7.5" in bytes(row["stderr"])


def test_stopped_node_is_infra_error(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "down", "min75")
    assert row["failed_stage"] == "probe"
    assert "cannot connect" in row["reason"], row["reason"]
    assert str(first_run.fleet["down"].port) in row["reason"]
    snap = snapshot_row(first_run, "down")
    assert snap["probe_error"] == row["reason"]
    assert (snap["hostname"], snap["cc"], snap["bytes_shipped"]) == (None, None, 0)
    assert json.loads(row["stage_details"])["probe"]["status"] == "infra"


def test_unknown_host_key_is_refused(first_run: FarmRunResult) -> None:
    a100 = first_run.fleet["a100"]
    row = result_row(first_run, "stranger", "min75")
    snap = snapshot_row(first_run, "stranger")
    assert row["failed_stage"] == "probe"
    for text in (row["reason"], snap["probe_error"]):
        assert "known_hosts" in text, text
        assert str(first_run.root / "stranger_known_hosts") in text, text
        assert a100.host_fingerprint in text, f"the fingerprint {a100.host_fingerprint}: {text}"
        assert a100.known_hosts_line() in text, "the exact line to add"
    # nothing was run there: the node's work folder was never created
    assert not first_run.workdir("stranger").exists()


def test_frozen_node_is_infra_error_within_its_connect_timeout(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "frozen", "min75")
    assert row["failed_stage"] == "probe"
    # The wording is racy ("Error reading SSH protocol banner" or "No existing session"):
    # paramiko's handshake wait and banner_timeout are both connect_timeout (ssh.py).
    assert "cannot connect" in row["reason"], row["reason"]
    probe = json.loads(row["stage_seconds"])["probe"]
    assert probe < 2 + 5, f"the probe of a hung sshd took {probe} s (connect_timeout is 2)"
    assert first_run.fleet["frozen"].running


def test_node_without_nvcc_is_infra_error(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "nonvcc", "min75")
    assert row["failed_stage"] == "probe"
    assert "no working nvcc" in row["reason"] and "no-such-nvcc" in row["reason"], row["reason"]
    snap = snapshot_row(first_run, "nonvcc")
    # the probe itself answered: the card is known, the expectation judged on it
    assert (snap["gpu_name"], snap["cc"], snap["nvcc_version"]) == (
        "NVIDIA A100-SXM4-40GB",
        "8.0",
        None,
    )
    assert "CC 8.0 satisfies" in row["expected_reason"]


def test_work_folder_with_a_space(first_run: FarmRunResult) -> None:
    row = result_row(first_run, "spaced", "min75")
    assert row["outcome"] == "pass", (
        "BUG in orchestrator/run/staging.py ensure(): the temporary folder `tmp = "
        'f"{final}.part.$$"` is used unquoted in the extraction script, so a work '
        "folder whose path has a space fails staging as infra-error. "
        f"Stored: {row['outcome']} at {row['failed_stage']}: {row['reason']!r}"
    )
    assert b"standin: PASS" in bytes(row["stdout"])


def test_changed_host_key_is_refused(first_run: FarmRunResult) -> None:
    """Issue 10, case 7: the message names host:port, both fingerprints and what to do."""
    row = result_row(first_run, "impostor", "min75")
    assert row["failed_stage"] == "probe"
    fleet = first_run.fleet
    reason = row["reason"]
    assert f"127.0.0.1:{fleet['h100'].port} offered the ssh-ed25519 key {fleet['h100'].host_fingerprint}" in reason
    assert f"holds {fleet['t4'].host_fingerprint} for it" in reason, reason
    assert f"ssh-keygen -R '[127.0.0.1]:{fleet['h100'].port}'" in reason and "man-in-the-middle" in reason
    assert not first_run.workdir("impostor").exists()


# ------------------------------------------------------------ a warm rerun

RERUN: dict[tuple[str, str], str] = {
    ("t4", "min75"): "pass",
    ("t4", "hopper"): "expected-refusal",
    ("t4", "ampere"): "expected-refusal",  # its build line changes: rebuilt
    ("a100", "min75"): "pass",
    ("a100", "ampere"): "pass",  # rebuilt too
    ("h100", "hopper"): "pass",
    ("nogpu", "min75"): "compile-only",
    ("drift", "min75"): "pass",
}
CHANGED = "ampere"


@pytest.fixture(scope="module")
def rerun(first_run: FarmRunResult) -> FarmRunResult:
    # Edit one variant's build line; the sources (and so the bundle) stay as they were.
    job_file = first_run.root / "jobs" / f"{KERNEL}.yaml"
    job = yaml.safe_load(job_file.read_text())
    job["variants"][CHANGED]["build"] = job["variants"][CHANGED]["build"].replace("-O1", "-O2")
    job_file.write_text(yaml.safe_dump(job, sort_keys=False))
    farm = load_farm(first_run.farm.file)
    summary, seconds = run_farm(first_run.root, farm, cells_for(farm, RERUN))
    return FarmRunResult(first_run.root, farm, first_run.fleet, summary, seconds)


def test_warm_rerun_ships_nothing(rerun: FarmRunResult) -> None:
    assert rerun.summary.bytes_shipped == 0
    for node in {n for n, _ in RERUN}:
        assert snapshot_row(rerun, node)["bytes_shipped"] == 0, node


def test_warm_rerun_reuses_unchanged_builds(rerun: FarmRunResult) -> None:
    for (node, variant), outcome in RERUN.items():
        row = result_row(rerun, node, variant)
        assert row["outcome"] == outcome, (node, variant, row["reason"])
        build = json.loads(row["stage_details"])["build"]["status"]
        if variant == CHANGED:
            assert (row["build_cached"], build) == (0, "ok"), (node, variant)
            assert "-O2" in row["build_command"]
        else:
            assert (row["build_cached"], build) == (1, "cached"), (node, variant)


def test_warm_rerun_is_green(rerun: FarmRunResult) -> None:
    assert rerun.summary.exit_code == EXIT_OK
    # the rerun is a run of its own, after the cold one, stored finished and green
    (latest,) = query(rerun.db, "SELECT MAX(id) AS id FROM runs")
    assert rerun.summary.run_id == latest["id"] > 1
    (run,) = query(rerun.db, "SELECT status, exit_code FROM runs WHERE id = ?", rerun.summary.run_id)
    assert (run["status"], run["exit_code"]) == ("finished", EXIT_OK)
    assert rerun.summary.outcomes and set(rerun.summary.outcomes) <= {"pass", "expected-refusal", "compile-only"}


def test_infra_errors_alone_exit_infra(rerun: FarmRunResult) -> None:
    cells = plan_cells(rerun.farm, [f"{KERNEL}:min75"], ["t4", "down"])
    summary, _ = run_farm(rerun.root, rerun.farm, cells)
    assert dict(summary.outcomes) == {"pass": 1, "infra-error": 1}
    assert summary.exit_code == EXIT_INFRA
