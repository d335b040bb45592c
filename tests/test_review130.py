"""Review 130: three leftovers a user trips over (review 127 saw the first two and left them).

- A node no probe reached (connection refused: its cells infra-error at probe, or not-run when the
  stop came first) had a node page saying "Kernels run unconfined: the shell runner cannot confine
  them, so a kernel could have written other cells' files on this node", and "Cell stages run by:
  shell": nothing ran there. Its snapshot has a probe error (and no runner): the page now says no
  kernel ran there, nothing to confine; a node whose cells ran keeps its runner's statement.
- The index's "What changed since the last run" said every cell without a verdict was "infra-error
  or not-run: the node, not the kernel". A cell not run because the operator stopped the run
  (SIGINT, SIGTERM) or because the farm died (the next start marked the run aborted) is no node's
  doing. Each cause is now counted as its stored reason says: "infra-error: the node, not the
  kernel", "not-run: the run was stopped (SIGINT), not the node's doing", "not-run: the run aborted".
- tests/test_redteam57.py and tests/test_redteam125.py each built an sshd node and wrote its
  ~/.bashrc before starting it, by hand. tests/nodes.py's `running_node` takes `home_files` now
  (written under the node's HOME before sshd starts, a "#!" script made executable); both use it.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path

from nodes import CARDS, query, running_node
from test_review127 import Stopped, stopped  # noqa: F401 - the SIGINT-stopped run on t4 and `down`
from toyfarm import toy_farm

from orchestrator.config.farm import load_farm
from orchestrator.report.site import render
from orchestrator.store.database import Store


def _by_id(html: str, ident: str) -> str:
    found = re.search(rf'<p id="{ident}"[^>]*>(.*?)</p>', html, re.DOTALL)
    assert found, f"no #{ident} in the page"
    return found.group(1)


# ------------------------------------------------------------ 1: a node no probe reached


def test_a_node_no_probe_reached_is_not_called_unconfined(stopped: Stopped) -> None:  # noqa: F811
    """`down` (nothing listens on its port) ran no cell: its page said its kernels ran unconfined."""
    (snap,) = query(stopped.root / "results.db", "SELECT probe_error, runner FROM node_snapshots WHERE node = 'down'")
    assert snap["probe_error"] and snap["runner"] is None, dict(snap)
    down = (stopped.root / "reports" / "nodes" / "down.html").read_text()
    confinement = _by_id(down, "confinement")
    assert "unconfined" not in confinement and "No kernel ran on this node in run 1" in confinement, confinement
    assert "shell" not in _by_id(down, "runner"), _by_id(down, "runner")
    # t4's kernel ran (and was stopped in its run): its page keeps what its runner could do
    (t4_snap,) = query(stopped.root / "results.db", "SELECT runner FROM node_snapshots WHERE node = 't4'")
    t4 = _by_id((stopped.root / "reports" / "nodes" / "t4.html").read_text(), "confinement")
    said = "Kernels run unconfined" if t4_snap["runner"] == "shell" else "Kernels run confined by Landlock"
    assert t4.startswith(said), (t4_snap["runner"], t4)


# ------------------------------------------------------------ 2: why a cell has no verdict


def _no_verdict(index: Path) -> dict[str, str]:
    """#no-verdict's causes: data-no-verdict -> its words."""
    text = _by_id(index.read_text(), "no-verdict")
    return {
        cause: html.unescape(words)
        for cause, words in re.findall(r'<span data-no-verdict="([^"]+)">(.*?)</span>', text)
    }


def test_a_stopped_runs_not_run_cells_are_not_called_the_nodes_doing(stopped: Stopped) -> None:  # noqa: F811
    """The SIGINT-stopped run: t4's not-run cell was "the node, not the kernel"."""
    db = stopped.root / "results.db"
    stop_rows = query(db, "SELECT id FROM results WHERE outcome = 'not-run' AND reason LIKE 'the run was stopped (%'")
    infra_rows = query(db, "SELECT id FROM results WHERE outcome = 'infra-error'")
    causes = _no_verdict(stopped.root / "reports" / "index.html")
    assert causes.get("stopped") == f"{len(stop_rows)} not-run: the run was stopped (SIGINT), not the node's doing", (
        causes
    )
    if infra_rows:  # `down`: refused at its probe, unless the stop came before it
        assert causes.get("node") == f"{len(infra_rows)} infra-error: the node, not the kernel", causes
    assert "infra-error or not-run: the node" not in (stopped.root / "reports" / "index.html").read_text()


def test_an_aborted_runs_not_run_cells_say_the_run_aborted(tmp_path: Path) -> None:
    """A run whose farm died, marked aborted at the next start (its cells not-run, "the farm was
    stopped before this cell finished (found at the next start)"), read as the node's doing."""
    farm_ = load_farm(toy_farm(tmp_path))
    store = Store(farm_.database_url)
    store.journal = None
    planned = [("toy", "plain", "here", "")]
    run_id = store.begin_run(
        planned, trigger="test", farm_version="0", host="h", config_file="farm.yaml", selection="--all"
    )
    assert [a[:2] for a in store.abort_unfinished_runs()] == [(run_id, 1)]
    render(store, tmp_path / "reports", run_id, farm_)
    store.close()
    causes = _no_verdict(tmp_path / "reports" / "index.html")
    assert causes == {
        "aborted": "1 not-run: the run aborted (the farm was stopped) before they finished, not the node's doing"
    }, causes


# ------------------------------------------------------------ 3: a node's start-up files, once


def test_running_node_writes_home_files_before_sshd_starts(tmp_path: Path) -> None:
    """`home_files`: the login reads its ~/.bashrc from the first command; a "#!" file is executable."""
    files = {".bashrc": "echo from-bashrc-130\n", "bin/hello": "#!/bin/sh\necho hello-130\n"}
    with contextmanager(running_node)("rc", tmp_path / "node", CARDS["t4"], home_files=files) as node:
        assert os.access(node.home / "bin" / "hello", os.X_OK)
        assert not os.access(node.home / ".bashrc", os.X_OK)
        ssh = ["ssh", "-i", str(node.client_key), "-p", str(node.port), "-o", f"UserKnownHostsFile={node.known_hosts}"]
        ssh += ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{node.user}@127.0.0.1", "~/bin/hello"]
        done = subprocess.run(ssh, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["from-bashrc-130", "hello-130"], done.stdout
