"""Red-team round 99: secrets and private data.

The report site goes to reviewers and students, the JSON and JUnit exports to CI logs, and a
kernel's stdout to its cell's page: what the farm hands a kernel, and what it writes where others
read, must hold no password of the results database, no token of the farm host's environment and
nothing of a node's `env:` that its name marks as a credential."""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, Fleet, nvidia_smi_script, query, standin_job, standin_variant
from sqlalchemy import create_engine, make_url, text
from test_verdicts import run
from toyfarm import toy_farm

POSTGRES_URL = os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql+psycopg://farm:farm@127.0.0.1:5432/farm_test")

# a kernel that prints every variable it was started with, as a student's debugging print might
ENV_DUMP = r"""
#include <cstdio>
extern char **environ;
int main() {
    for (char **e = environ; *e; ++e) std::printf("ENV %s\n", *e);
    std::printf("toy: PASS\n");
    return 0;
}
"""


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database's URL, its password in it."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    name = f"farm_t_rt99_{secrets.token_hex(4)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def everything_written(root: Path) -> bytes:
    """Every file under `root`, and the base64 fields of its journals decoded, as one text to search."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found.append(data)
            if path.suffix == ".jsonl":
                for word in data.split(b'"'):
                    with contextlib.suppress(ValueError):  # not every word between quotes is base64
                        found.append(base64.b64decode(word, validate=True))
    return b"\n".join(found)


def test_the_local_node_hands_its_kernels_none_of_the_farm_hosts_credentials(
    tmp_path: Path, postgres_database: str
) -> None:
    """The `local` node started every command with the farm's own environment, whole: the run's
    FARM_DATABASE, its password in it, libpq's PGPASSWORD, the CI's GITHUB_TOKEN and the operator's
    SSH agent (which logs into every node of the fleet). A kernel that printed its environment put
    them on its cell's page, in results.db and in the run's journal. The local node's commands
    carry the farm's environment less its credentials now; a variable a kernel needs goes in the
    node's `env:`, which it still gets."""
    config = toy_farm(tmp_path, source=ENV_DUMP)
    config.write_text(config.read_text() + "    env: {COURSE_SETTING: course-value-1}\n")
    smi = tmp_path / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    token = "ghp_" + secrets.token_hex(12)
    pg_password = "pgpw-" + secrets.token_hex(6)
    password = make_url(postgres_database).password
    env = {
        **os.environ,
        "PATH": f"{smi.parent}:{os.environ['PATH']}",
        "FARM_DATABASE": postgres_database,
        "PGPASSWORD": pg_password,
        "GITHUB_TOKEN": token,
        "SSH_AUTH_SOCK": str(tmp_path / "agent.sock"),
        "MIRROR_URL": f"https://ci:{token[::-1]}@mirror.example.org/simple",
    }
    done = farm("verify", "--all", "--config", str(config), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = farm("show", "1", "--config", str(config), env=env)
    site = farm("report", "--run", "1", "--out", str(tmp_path / "site"), "--config", str(config), env=env)
    assert shown.returncode == 0 and site.returncode == 0, shown.stderr + site.stderr
    page = (tmp_path / "site" / "cells" / "1.html").read_text()
    assert "ENV COURSE_SETTING=course-value-1" in page, page  # what farm.yaml gives the node, it gets
    assert "ENV PATH=" in page and "ENV HOME=" in page  # the environment is the farm's still
    written = everything_written(tmp_path) + shown.stdout.encode() + shown.stderr.encode()
    for secret in (f":{password}@", pg_password, token, token[::-1], "agent.sock"):
        assert secret.encode() not in written, secret


def test_a_nodes_env_values_are_on_no_command_line_of_the_node(
    ssh_fleet: Fleet, make_farm, tmp_path: Path, runner: str
) -> None:
    """A node's `env:` was exported in front of each command (`export VENDOR_TOKEN=...; ...`),
    and a command's words are its shell's command line, which every user of the node reads
    (`ps`, /proc/PID/cmdline): on a shared GPU node a student saw the course's license token for
    as long as any probe, staging or cell command ran (the whole cell under the shell runner).
    The exports go on the command's stdin now; the kernel gets each value as it was written."""
    secret = "tok" + secrets.token_hex(8)
    value = f'{secret} it\'s 100% \\ "$HOME" `x`'
    node = ssh_fleet["t4"]
    prelude = tmp_path / "show.sh"
    # in hex: the value itself is shown as *** in the output the farm keeps (round 105)
    prelude.write_text('printf "VALUE<%s>" "$VENDOR_TOKEN" | od -An -tx1 | tr -d " \\n"; echo; sleep 1\n')
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    config = make_farm(
        tmp_path,
        {"t4": node.farm_entry(tmp_path / "work", env={"VENDOR_TOKEN": value})},
        [standin_job("standin", {"v": variant})],
    )
    seen: list[str] = []
    done = threading.Event()

    def look() -> None:
        while not done.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                with contextlib.suppress(OSError):
                    if secret.encode() in cmdline.read_bytes():
                        seen.append(str(cmdline))
            time.sleep(0.02)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        _, summary = run(config)
    finally:
        done.set()
        watcher.join()
    assert summary.outcomes == {"pass": 1}, summary.outcomes
    (stdout,) = [bytes(row["stdout"]) for row in query(tmp_path / "results.db", "SELECT stdout FROM results")]
    assert f"VALUE<{value}>".encode().hex().encode() in stdout, stdout
    assert not seen, seen
