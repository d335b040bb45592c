"""Red-team round 57: nodes the farm has never seen, and how their logins differ.

sshd runs each command as `SHELL -c COMMAND`, SHELL the login's shell from the password
database. A test node gets another login shell without touching this machine's users: its
sshd starts in a mount namespace of its own over a copy of /etc/passwd (`unshare --mount`,
`mount --bind`), which goes when sshd does."""

from __future__ import annotations

import getpass
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from nodes import CARDS, SshNode, running_node, standin_job, standin_variant
from test_verdicts import MIN75, rows, run

VARIANTS = {
    "a-pass": standin_variant("PASS", MIN75, "MIN_CC=75"),
    "b-fail": standin_variant("FAILNUM", MIN75, "MIN_CC=75"),
}


def login_node(root: Path, shell: str) -> SshNode:
    """A T4 stand-in node whose login (this machine's user, as the tests run) has `shell`."""
    node = SshNode("odd", root, CARDS["t4"])
    node.prepare()
    passwd = root / "passwd"
    user = getpass.getuser()
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        # its home the node's own (sshd starts the command there): a login shell that misread the
        # farm's commands wrote files named "2" and "=" into this machine's /root
        lines.append(":".join([*fields[:5], str(node.home), shell]) if fields[0] == user else line)
    passwd.write_text("\n".join(lines) + "\n")
    bind = f'mount --bind {shlex.quote(str(passwd))} /etc/passwd && exec "$@"'
    node.prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind, "sh"]
    return node


@pytest.fixture
def odd_node(tmp_path: Path) -> Iterator[Callable[[str], SshNode]]:
    made: list[SshNode] = []

    def make(shell: str, *, rc: tuple[str, str] | None = None) -> SshNode:
        node = login_node(tmp_path / f"node-{len(made)}", shell)
        if rc is not None:  # a start-up file of the login: (its path under HOME, its text)
            (node.home / rc[0]).parent.mkdir(parents=True, exist_ok=True)
            (node.home / rc[0]).write_text(rc[1])
        made.append(node)
        node.start()
        return node

    yield make
    for node in made:
        node.stop()


def outcomes(make_farm, tmp_path: Path, node: SshNode, runner: str) -> dict[str, tuple[str, str]]:
    entry = node.farm_entry(tmp_path / "work", runner=runner)
    config = make_farm(tmp_path / "farm", {"odd": entry}, [standin_job("standin", VARIANTS)])
    _, summary = run(config)
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    return {variant: (row["outcome"], row["reason"] or "") for (variant, _), row in found.items()}


@pytest.mark.parametrize(
    ("shell", "runner"),
    [
        ("/usr/bin/tcsh", "auto"),
        ("/usr/bin/tcsh", "cell"),
        ("/bin/bash", "cell"),
        ("/usr/bin/fish", "shell"),
        ("/usr/bin/zsh", "shell"),
    ],
)
def test_a_node_whose_login_shell_is_not_posix_runs_its_cells(
    odd_node, make_farm, tmp_path: Path, shell: str, runner: str
) -> None:
    """The farm's commands are POSIX sh, sent as they are: sshd gave them to tcsh (no `$(...)`,
    no `2>&1`), fish or zsh (no word splitting of `$x`), whose node was infra-error "no working
    nvcc at '/usr/local/bin/nvcc' ()", its nvcc fine, the operator sent to the wrong tool. Each
    command now goes as one printf-encoded word every login shell passes to /bin/sh alike."""
    found = outcomes(make_farm, tmp_path, odd_node(shell), runner)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found


@pytest.mark.parametrize("shell", ["/usr/sbin/nologin", "/bin/busybox"])
def test_a_login_that_runs_no_command_is_told_so(odd_node, make_farm, tmp_path: Path, shell: str) -> None:
    """A login shell that runs nothing (nologin; busybox, not called as `sh`) had its node told
    "no working nvcc", the probe's missing answers read as a broken toolkit. The probe now sees
    that none of its lines ran, and says the login shell, which user, and where to look."""
    found = outcomes(make_farm, tmp_path, odd_node(shell), "auto")
    for outcome, reason in found.values():
        assert outcome == "infra-error"
        assert "nvcc" not in reason, reason
        assert "login shell of" in reason and "getent passwd" in reason, reason


@pytest.mark.parametrize("runner", ["auto", "shell"])
def test_a_login_umask_that_masks_the_owner_fails_no_kernel(ssh_fleet, make_farm, tmp_path: Path, runner: str) -> None:
    """A ~/.bashrc with `umask 0777` (the login's start-up file, read by sshd's `bash -c`): the
    farm's builds and copies had mode 0, and the passing kernel was judged fail, "the kernel's
    copy was gone or not executable when the run called it" (resident runner), or the node
    infra-error "its work folder is mounted noexec" (shell runner), which it is not. The farm's
    commands now give the owner its own bits back (`umask u+rwx`); group and others stay as masked."""
    with contextmanager(running_node)(
        "umask", tmp_path / "node", CARDS["t4"], home_files={".bashrc": "umask 0777\n"}
    ) as node:
        found = outcomes(make_farm, tmp_path, node, runner)
    assert found["a-pass"][0] == "pass", found
    assert found["b-fail"][0] == "fail", found


def test_a_read_only_home_names_the_folder_and_why(make_farm, tmp_path: Path) -> None:
    """A login whose HOME is read-only (a site's NFS home mounted ro on compute nodes), with the
    usual `workdir: ~/...`: the node was infra-error "cannot create its work folder '~/farm'",
    leaving the operator to guess which folder and why. It now says the folder, mkdir's own
    words, the login's HOME, and the key to set."""
    node = SshNode("rohome", tmp_path / "node", CARDS["t4"])
    node.prepare()
    home = shlex.quote(str(node.home))
    node.prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    node.prefix += [f'mount --bind -o ro {home} {home} && exec "$@"', "sh"]
    node.start()
    try:
        entry = node.farm_entry("~/farm", runner="auto")
        config = make_farm(tmp_path / "farm", {"rohome": entry}, [standin_job("standin", VARIANTS)])
        _, summary = run(config)
    finally:
        node.stop()
    found = rows(tmp_path / "farm" / "results.db", summary.run_id)
    for row in found.values():
        assert row["outcome"] == "infra-error"
        assert "Read-only file system" in row["reason"], row["reason"]
        assert f"HOME is {node.home}" in row["reason"] and "`workdir`" in row["reason"], row["reason"]
