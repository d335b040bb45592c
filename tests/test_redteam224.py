"""Red-team round 224: nodes whose environment differs from the tests' default node, on real sshd nodes.

A German node: its login's ~/.bashrc sets `LANG=C.UTF-8 LANGUAGE=de` (no de_DE locale is built here;
gettext follows LANGUAGE in any locale but C, and the node has coreutils' and glibc's German
catalogs), so its tools and the C library say their errors in German ("Die Ressource ist zur Zeit
nicht verfügbar" for EAGAIN).

Broke (before/after):
- The node's user out of processes (a pids cgroup at its limit): gcc's "collect2: fatal error:
  vfork: Die Ressource ist zur Zeit nicht verfügbar" matched none of the English words the farm
  looked for, and the kernel got `build-fail`, exit 1, though the node, asked, could not fork.
  Now the words after `vfork: ` may be any language's: infra-error, out of processes, exit 4.
- A bare `nvcc:` the node's PATH lacks (shell runner): timeout's "Datei oder Verzeichnis nicht
  gefunden" lost the advice to give its full path, and the probe was tried again as a passing
  fault. Now "not found" is the status, 127: the advice, one try.

And a login's `umask 000` (~/.bashrc): everything the farm made on the node was writable by every
account there (sources, cached binaries 0777, cells). Now others never get write (`umask u+rwx,o-w`).
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from faults import faults_job, faults_variant
from faults import write_fault_farm as write_farm
from nodes import CARDS, SshNode, running_node
from test_faults import attempts, results, run_farm
from test_redteam116 import MIN75, NAME, out_of_processes
from test_redteam125 import outcomes

from orchestrator.errors import EXIT_INFRA
from orchestrator.run.node_limits import fork_failed

GERMAN = "export LANG=C.UTF-8 LANGUAGE=de\n"


@pytest.fixture
def german(tmp_path: Path) -> Iterator[SshNode]:
    yield from running_node(NAME, tmp_path / "node", CARDS["t4"], home_files={".bashrc": GERMAN})


def test_a_german_node_out_of_processes_is_no_build_fail(german: SshNode, tmp_path: Path) -> None:
    """As test_redteam116's, its node German. Before: `build-fail` "collect2: fatal error: vfork: Die
    Ressource ist zur Zeit nicht verfügbar", exit 1. Figure: infra-error saying out of processes, exit 4."""
    code, rows, tries = out_of_processes(german, tmp_path, "rt224")
    assert rows["after"]["outcome"] == "infra-error", rows["after"]["reason"]
    said = [t["error"] or "" for t in tries if t["variant"] == "after"]
    # gcc's German vfork words, end to end: the room watch takes no pid of the group (red-team round 266)
    assert any("out of processes" in error and "vfork" in error for error in said), said
    assert code == EXIT_INFRA


@pytest.mark.parametrize(
    "line",
    [
        "collect2: fatal error: vfork: Die Ressource ist zur Zeit nicht verfügbar",
        "bash: fork: Wiederholung: Die Ressource ist zur Zeit nicht verfügbar",
        "g++: fatal error: cannot execute 'cc1plus': posix_spawn: Ressource temporairement non disponible",
    ],
)
def test_fork_failure_words_in_any_language(line: str) -> None:
    """Before: none read as a tool that could not start a process. Figure: each does."""
    assert fork_failed(f"before\n{line}\nafter".encode())


def test_a_german_node_without_its_nvcc_is_told_where_to_find_it(german: SshNode, tmp_path: Path) -> None:
    """The node's `nvcc:` a bare name its login's PATH lacks. Before: "no working nvcc at 'nvcc-rt224'
    (timeout: der Befehl „nvcc-rt224“ konnte nicht ausgeführt werden: Datei oder Verzeichnis nicht
    gefunden ...)", without what to do, and the probe tried again as a passing fault. Figure: the
    reason says to give its full path; one try of the node's setup."""
    entry = german.farm_entry(tmp_path / "work", nvcc="nvcc-rt224", connect_timeout=3, runner="shell")
    variants = {"after": faults_variant("SLOWPASS", MIN75, "SLEEP_S=0")}
    config = write_farm(tmp_path, {NAME: entry}, [faults_job(variants)], retries=2, retry_backoff=0.2)
    summary, _ = run_farm(config)
    row = results(tmp_path / "results.db", summary.run_id)[(NAME, "after")]
    assert row["outcome"] == "infra-error", row["reason"]
    assert "give its full path" in row["reason"], row["reason"]
    assert len(attempts(tmp_path / "results.db", summary.run_id, NAME, None)) == 1


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_login_umask_000_leaves_no_farm_file_writable_by_others(make_farm, tmp_path: Path, runner: str) -> None:
    """A ~/.bashrc with `umask 000`. Before: the work folder's bundles (the kernels' sources), builds
    (the cached binaries, 0777), cells and locks were writable by every account on the node, which
    could change what the farm builds, runs and reads back. Figure: the verdicts as the kernels are,
    nothing under the work folder writable by others (the group's bits stay as the login masks them)."""
    home = {".bashrc": "umask 000\n"}
    with contextmanager(running_node)("odd", tmp_path / "node", CARDS["t4"], home_files=home) as node:
        found = outcomes(make_farm, tmp_path, node, runner)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found
    work = tmp_path / "work"
    shared = [
        f"{oct(mode)} {path}"
        for path in [work, *work.rglob("*")]
        if not stat.S_ISLNK(mode := path.lstat().st_mode) and mode & stat.S_IWOTH
    ]
    assert not shared, shared[:10]
