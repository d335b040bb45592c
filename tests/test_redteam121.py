"""Red-team round 121: a local node's work folder among the farm's own folders, and a farm with no home.

Broke (before -> after):

1. A `transport: local` node whose `workdir` was the reports folder (or inside it, the journal
   folder, jobs/ or kernels/), or whose own `cells/` held farm.yaml's `reports`, was run without a
   word, exit 0: the node's builds/ (the kernels' binaries), bundles/ (the course's sources),
   incoming/ and each running cell's raw stdout and stderr, the secrets in them not yet masked,
   went into the folder the site is published from, among the journals `farm import` reads, or
   among the course's sources. Now every command refuses such a farm.yaml at load, exit 3, naming
   farm.yaml, `nodes.NODE.workdir`, both folders and what is expected; nothing is written (no
   results.db, no reports/).
2. The farm started with no home at all (no HOME, and a uid the password database lacks: `env -i`,
   a container's `--user 54321`): every command, the read-only `farm show`, `farm jobs` and
   `farm report` too, was "internal error (RuntimeError: Could not determine home directory.);
   this is a bug in farm", exit 70, since farm.yaml's load expanded every node's default
   `known_hosts: ~/.ssh/known_hosts`. Now they run; a local node's relative workdir is that node's
   infra-error saying there is no home (round 93's words for a HOME that is no folder), an SSH
   node's `~/` known_hosts or key_file its infra-error saying to give an absolute path (exit 4,
   not 70), and the farm's archive cache goes under the temp folder.

Held (kept as guards here): a local node's workdir beside the farm's folders (the toy farm's
root/node, the usual layout) and one that holds the whole project (the project root's parent)
still run; `reports: .` and a `reports` that is a file were already refused (round 82's checks);
`reports: ~/site` with no home was already refused naming the key; an empty FARM_DATABASE or
FARM_CONFIG reads as unset; a UTF-16 or alias-bomb farm.yaml, `--run`/`show` ids past SQLite's
integers, TMPDIR missing or a file, and `lock_dir` in jobs/ or the journal folder (a hidden lock
file, no job read from it) all held. A `lock_dir` in the reports folder published its holder file
(this machine's name, the running farm's pid) with the site: refused now, naming the key (review).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm, farm_env
from toyfarm import toy_farm

from orchestrator.errors import EXIT_CONFIG, EXIT_INFRA, EXIT_OK


def _workdir(config: Path, workdir: str, reports: str = "reports") -> None:
    text = config.read_text()
    lines = [
        f"    workdir: {workdir}" if line.startswith("    workdir:") else line
        for line in text.splitlines()
        if not line.startswith("reports:")
    ]
    config.write_text(f"reports: {reports}\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("workdir", "reports", "key", "says"),
    [
        ("{root}/reports", "reports", "reports", "which is the farm's `reports` folder"),
        ("{root}/reports/node", "reports", "reports", "the farm's `reports` folder"),
        ("{root}/results.db.journal", "reports", "journal", "which is the farm's `journal` folder"),
        ("{root}/kernels/node", "reports", "kernels", "the farm's `kernels` folder"),
        ("{root}/jobs", "reports", "jobs", "which is the farm's `jobs` folder"),
        ("{root}/node", "node/cells/site", "reports", "whose own subfolders hold the farm's `reports` folder"),
    ],
)
def test_a_local_nodes_workdir_among_the_farms_folders_is_refused_and_nothing_written(
    tmp_path: Path, workdir: str, reports: str, key: str, says: str
) -> None:
    config = toy_farm(tmp_path)
    _workdir(config, workdir.format(root=tmp_path), reports)
    done = farm("verify", "--all", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    error = done.stderr.strip()
    assert error.startswith(f"Error: {config}: nodes.here.workdir: found "), error
    assert says in error and "expected a folder of the node's own" in error, error
    assert key in error
    assert not (tmp_path / "results.db").exists()
    assert not (tmp_path / "reports").exists() and not (tmp_path / "node").exists()
    # the read-only commands refuse it alike: the same farm.yaml, the same words
    jobs = farm("jobs", "--config", str(config), cwd=tmp_path)
    assert jobs.returncode == EXIT_CONFIG and "nodes.here.workdir" in jobs.stderr, jobs.stderr


@pytest.mark.parametrize("above", [False, True])
def test_a_local_nodes_workdir_beside_or_above_the_farms_folders_still_runs(tmp_path: Path, above: bool) -> None:
    root = tmp_path / "farm"
    config = toy_farm(root)
    _workdir(config, str(tmp_path if above else root / "node"))  # above: the folder that holds the project
    done = farm("verify", "--all", "--config", str(config), cwd=root)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert (root / "reports" / "index.html").is_file()
    assert not (root / "reports" / "builds").exists() and not (root / "reports" / "bundles").exists()


@pytest.mark.parametrize("lock_dir", ["reports", "reports/locks"])
def test_a_lock_dir_in_the_reports_folder_is_refused(tmp_path: Path, lock_dir: str) -> None:
    """The run lock's holder file names the machine and the pid of the farm that holds it: in the
    reports folder it went out with the published site."""
    config = toy_farm(tmp_path)
    (tmp_path / lock_dir).mkdir(parents=True)
    config.write_text(f"lock_dir: {lock_dir}\n" + config.read_text())
    done = farm("verify", "--all", "--config", str(config), cwd=tmp_path)
    assert done.returncode == EXIT_CONFIG, done.stdout + done.stderr
    assert done.stderr.strip().startswith(f"Error: {config}: lock_dir: found '{lock_dir}'"), done.stderr
    assert "in the farm's `reports` folder" in done.stderr and "apart from the published site" in done.stderr
    assert not (tmp_path / "results.db").exists()
    assert not list((tmp_path / "reports").rglob("*.holder")) and not (tmp_path / "reports" / "index.html").exists()


# ------------------------------------------------------------ 2. a farm with no home at all

NO_HOME_UID = 54321  # no entry in this machine's password database


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder the uid without a home may write (pytest's tmp_path is root's alone, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="rt121-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _homeless(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`farm ARGS` as cron, `env -i` or a container's `--user 54321` start it: no HOME, and a uid
    the password database lacks, so Python's Path.home() has nothing to read."""
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    assert "HOME" not in farm_env(env)
    with pytest.raises(KeyError):
        pwd.getpwuid(NO_HOME_UID)
    setpriv = ["setpriv", f"--reuid={NO_HOME_UID}", f"--regid={NO_HOME_UID}", "--clear-groups"]
    return farm(*args, cwd=cwd, env=env, timeout=120, wrapper=setpriv)


def test_a_farm_with_no_home_runs_and_reads_its_database(open_folder: Path) -> None:
    """Every command was "internal error (RuntimeError: Could not determine home directory.); this
    is a bug in farm", exit 70: farm.yaml's load expanded each node's default `known_hosts:
    ~/.ssh/known_hosts` (its `farm show` and `farm report` too), the local node asked for its
    HOME, and the run for the archive cache's ~/.cache."""
    config = toy_farm(open_folder)
    for path in [open_folder, *open_folder.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    done = _homeless("verify", "--all", "--config", str(config), cwd=open_folder)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert "compile-only" in done.stdout and "internal error" not in done.stderr, done.stdout + done.stderr
    for args in (("show", "1"), ("jobs",), ("report",), ("report", "--format", "json")):
        read = _homeless(*args, "--config", str(config), cwd=open_folder)
        assert read.returncode == EXIT_OK, (args, read.stdout + read.stderr)
        assert "internal error" not in read.stderr, read.stderr
    # a relative workdir has no home to go under: the node says so, exit 4, not "a bug in farm"
    _workdir(config, ".cache/farm")
    relative = _homeless("verify", "--all", "--config", str(config), cwd=open_folder)
    assert relative.returncode == EXIT_INFRA, relative.stdout + relative.stderr
    said = f"its workdir '.cache/farm' is under the farm's HOME (none: no HOME, and uid {NO_HOME_UID} has no entry"
    assert said in relative.stdout, relative.stdout


def test_an_ssh_node_s_default_known_hosts_with_no_home_is_the_node_s_infra_error(open_folder: Path) -> None:
    """Each cell of an SSH node was "internal error in the farm (RuntimeError: ...)", the run exit 70."""
    config = toy_farm(open_folder)
    config.write_text(config.read_text() + "  far:\n    host: 127.0.0.1\n    port: 1\n    user: farm\n")
    for path in [open_folder, *open_folder.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    done = _homeless("verify", "--all", "--config", str(config), cwd=open_folder)
    assert done.returncode == EXIT_INFRA, done.stdout + done.stderr
    assert "internal error" not in done.stdout + done.stderr, done.stdout + done.stderr
    said = "node 'far': its known_hosts '~/.ssh/known_hosts' is under the farm's home, and it has none"
    assert said in done.stdout and "as an absolute path, or set HOME" in done.stdout, done.stdout
