"""Red-team round 125: what a node's login does around every command, on real sshd nodes.

sshd runs each command as `SHELL -c COMMAND`, and bash reads ~/.bashrc first.

Broke (before/after):
- A ~/.bashrc that reads stdin (`read -t 1 answer`: a prompt, a program draining its input) took
  the first bytes the farm sent for the command: the sources' tar.gz arrived cut, and a healthy
  node was infra-error "extracting sources ... failed: gzip: stdin: not in gzip format" on all
  three runners, no cell run. Now a command given stdin prints a ready byte on stderr first and
  the farm sends stdin only after it (transport/stdin_gate.py): pass and fail as the kernels are.

Held (kept as guards): a banner on stdout and stderr, a python3 wrapper first on PATH printing
before it runs, a German locale (LC_ALL=de_DE.UTF-8), an EXIT trap that prints, `set -euo pipefail`.

Open: a start-up file that leaves a reader of stdin running in the background (`cat <&0 &`)
still takes stdin; the run no longer hangs (it outlived 280 s): the resident runner that says
nothing within 60 s makes the node unusable, its cells infra-error naming ~/.bashrc and the fix
(tests/test_review128.py). No runner works on such a node yet.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
from nodes import CARDS, SshNode, running_node, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

VARIANTS = {
    "a-pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    "b-fail": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
}

# a site's python3 first on PATH: a module system's wrapper that says so on stdout
WRAPPER = '#!/bin/sh\necho "python/3 module loaded"\nexec /usr/bin/python3 "$@"\n'

RCS = {
    "reads-stdin": "read -t 1 first_line_of_stdin || true\n",
    "banner": 'echo "Welcome to gpu-node-7: quota 91% used"\necho "motd line" >&2\n',
    "wrapper": 'export PATH="$HOME/bin:$PATH"\n',
    "locale": "export LC_ALL=de_DE.UTF-8 LANG=de_DE.UTF-8 LC_NUMERIC=de_DE.UTF-8\n",
    "trap": "trap 'echo bye-from-bashrc' EXIT\n",
    "pipefail": "set -euo pipefail\n",
}


def outcomes(make_farm, tmp_path: Path, node: SshNode, runner: str) -> dict[str, tuple[str, str]]:
    entry = node.farm_entry(tmp_path / "work", runner=runner)
    config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", VARIANTS)])
    _, summary = run(config)
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    return {variant: (row["outcome"], row["reason"] or "") for (variant, _), row in found.items()}


@pytest.mark.parametrize("rc", sorted(RCS))
@pytest.mark.parametrize("runner", ["auto", "shell", "cell"])
def test_a_login_start_up_file_changes_no_verdict(make_farm, tmp_path: Path, rc: str, runner: str) -> None:
    """Each ~/.bashrc of RCS: the passing kernel passes and the failing one fails (reads-stdin was
    infra-error "gzip: stdin: not in gzip format" for both, its node healthy)."""
    home = {".bashrc": RCS[rc], "bin/python3": WRAPPER}  # WRAPPER, a script: made executable
    with contextmanager(running_node)("odd", tmp_path / "node", CARDS["t4"], home_files=home) as node:
        found = outcomes(make_farm, tmp_path, node, runner)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found
