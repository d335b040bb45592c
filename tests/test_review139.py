"""Review 139: a `local` node's commands start with a login's environment, from an allowlist.

Before: the local node's commands got the farm process's environment less the variables a denylist
of names took for credentials (red-team 99, 135). A secret under any other name reached every
kernel and build of the node, and a kernel that printed its environment put it on its cell's page,
in results.db and in the journal: a Sentry DSN (SENTRY_DSN, its key in the URL's user part), a
webhook's URL (SLACK_WEBHOOK_URL, the URL is the credential), a license server's string
(FOO_LICENSE), whatever a CI injects. So did the farm's own CUDA_VISIBLE_DEVICES, PYTHONPATH and
LD_PRELOAD, which no SSH login hands its commands.

After: the local node's commands get only the farm's variables a login has and a build or a CUDA
program reads (local_env.LOGIN: PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, TZ, TERM, TMPDIR,
LD_LIBRARY_PATH, SLURM_CONF; LC_*, CUDA_* but CUDA_VISIBLE_DEVICES, NVIDIA_*), of those none that reads as a
credential (a URL with a password in LD_LIBRARY_PATH still goes), plus the node's `env:` from
farm.yaml, as an SSH node does: an operator who needs another variable declares it there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from test_redteam99 import ENV_DUMP
from toyfarm import TOY_SOURCE, toy_farm

from orchestrator.transport.local_env import node_environment

# what a CI or an operator's shell sets that no credential name matches
UNLISTED = {
    "SENTRY_DSN": "https://a1b2c3d4e5f6rt139@o42.ingest.sentry.io/7",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0RT139/B0RT139/xoxrt139webhook",
    "FOO_LICENSE": "27000@license-rt139.example.org",
}


# the farm's own that a login lacks: what its python3 imports, a preload, its card, a build's flags, its Slurm job
NO_LOGINS = ["PYTHONPATH", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "NVCC_APPEND_FLAGS", "SLURM_JOB_ID"]
LOGINS = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "TZ", "TERM", "TMPDIR"]
LOGINS += ["LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_CACHE_PATH", "NVIDIA_DRIVER_CAPABILITIES", "SLURM_CONF"]


@pytest.mark.parametrize("name", [*UNLISTED, *NO_LOGINS])
def test_a_variable_no_login_has_reaches_no_local_command(name: str) -> None:
    """Before: every name the credential denylist missed went to the node's commands."""
    env = node_environment({name: "/opt/rt139/value", "PATH": "/usr/bin"})
    assert name not in env and env == {"PATH": "/usr/bin"}, env


@pytest.mark.parametrize("name", LOGINS)
def test_a_login_variable_of_the_farms_still_reaches_local_commands(name: str) -> None:
    assert node_environment({name: "/opt/rt139/value"}) == {name: "/opt/rt139/value"}


@pytest.mark.parametrize(
    "name, value",
    [
        ("LD_LIBRARY_PATH", "https://ci:pw-rt139@mirror.example.org/lib"),  # a URL's password
        ("CUDA_API_KEY", "rt139-key"),  # a credential's name under a login prefix
        ("NVIDIA_API_KEY", "nvapi-rt139"),
        ("LC_SECRET", "x"),
    ],
)
def test_a_credential_among_the_login_variables_still_goes(name: str, value: str) -> None:
    """The denylist stays a second guard over the allowlist."""
    assert node_environment({name: value, "HOME": "/home/u"}) == {"HOME": "/home/u"}


def _local_farm(root: Path, source: str) -> tuple[Path, dict[str, str]]:
    """The toy farm's local node with a COURSE_LICENSE in its `env:`, and a farm environment whose
    PATH finds a T4's stand-in nvidia-smi."""
    config = toy_farm(root, source=source)
    config.write_text(config.read_text() + "    env: {COURSE_LICENSE: 27000@course-rt139}\n")
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    return config, {**os.environ, "PATH": f"{smi.parent}:{os.environ['PATH']}", "HOME": str(Path.home())}


def test_a_local_kernel_gets_a_logins_variables_and_the_nodes_env_not_the_farms_others(tmp_path: Path) -> None:
    """End to end: a kernel that prints its environment on a local node. Before: SENTRY_DSN, the
    webhook's URL and FOO_LICENSE were in its stdout (results.db, the cell's page)."""
    config, env = _local_farm(tmp_path, ENV_DUMP)
    env.update(UNLISTED, LANG="C.UTF-8", CUDA_HOME="/opt/cuda-rt139", CUDA_VISIBLE_DEVICES="rt139-card")
    done = farm("verify", "--all", "--config", str(config), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = query(tmp_path / "results.db", "SELECT stdout FROM results")
    stdout = bytes(row["stdout"]).decode()  # stored as the kernel printed it
    printed = set(stdout.splitlines())
    # its tools, the stand-in's folder among them (a pyenv shim's python3 runner puts its own in front,
    # the local node the bundled cuobjdump's at the end)
    assert any(line.startswith("ENV PATH=") and env["PATH"] in line for line in printed), stdout
    assert f"ENV HOME={env['HOME']}" in printed and "ENV LANG=C.UTF-8" in printed
    assert "ENV CUDA_HOME=/opt/cuda-rt139" in printed
    assert "ENV COURSE_LICENSE=27000@course-rt139" in printed  # declared in the node's `env:`
    written = stdout + (tmp_path / "results.db").read_bytes().decode("latin-1")
    for name, value in UNLISTED.items():
        assert name not in written and value not in written, name
    assert not any(line.startswith("ENV PYTHONPATH=") for line in printed)  # the farm's own imports
    assert "rt139-card" not in written  # the farm's own pin is no login's; the cell's is by UUID


def test_farm_nodes_names_the_farms_variables_a_local_node_does_not_get(tmp_path: Path) -> None:
    """An operator whose kernel misses a variable on a local node finds why in `farm nodes`: the
    names left out (never their values), less those the node's `env:` declares."""
    config, env = _local_farm(tmp_path, TOY_SOURCE)
    env.update(UNLISTED, COURSE_LICENSE="the farm's own value", LANG="C.UTF-8")
    done = farm("nodes", "--config", str(config), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (note,) = [line for line in done.stdout.splitlines() if "do not get" in line]
    named = note.split(": ", 2)[2].split("; ")[0].split(", ")
    assert {"SENTRY_DSN", "SLACK_WEBHOOK_URL", "FOO_LICENSE"} <= set(named), note
    assert not {"PATH", "HOME", "LANG", "COURSE_LICENSE"} & set(named), note
    assert not any(value in note for value in UNLISTED.values()), note
    assert "`env:` in farm.yaml" in note
