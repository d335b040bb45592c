"""Review round 191: what a confined kernel of a `local` node (the farm's own machine, the farm's
user) could still reach of the farm's credentials beside its secret files (red-team 189).

Broke (before/after): the farm's SSH agent. SSH_AUTH_SOCK was no longer in a local kernel's
environment (red-team 99), but the agent's socket is a file of the farm's user wherever the kernel
finds it (/tmp/ssh-*/agent.*), and Landlock below LANDLOCK_ACCESS_FS_RESOLVE_UNIX does not confine a
connect() to one: a kernel logged into the farm's other nodes with the agent's keys, and its cell
said "confined" with nothing more. Now the node's runner hides the farm's agent sockets where its
Landlock can (RESOLVE_UNIX), and elsewhere says in the cell's details that it could not.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import CARDS, SshNode, nvidia_smi_script, query
from toyfarm import toy_farm

LOGGED_IN = "logged-in-191"


@pytest.fixture
def agent_node(tmp_path: Path):
    """A loopback sshd node `far` and a real ssh-agent (its socket where OpenSSH makes one,
    ssh-XXXX/agent.N) holding far's client key: (node, the agent's socket)."""
    node = SshNode("far", tmp_path / "far", CARDS["t4"])
    node.prepare()
    node.start()
    folder = tmp_path / "ssh-Ab12Cd"
    folder.mkdir(mode=0o700)
    sock = folder / "agent.4242"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.05)
        env = dict(os.environ, SSH_AUTH_SOCK=str(sock))
        subprocess.run(["ssh-add", "-q", str(node.client_key)], check=True, capture_output=True, env=env)
        yield node, sock
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        node.stop()


def _farm_with_agent(root: Path, node: SshNode, sock: Path) -> tuple[Path, dict[str, str]]:
    """The toy farm on its local node (a T4 stand-in) beside `far`, whose kernel looks for agent
    sockets as a kernel would (by a glob, SSH_AUTH_SOCK being no variable of its) and logs into far."""
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    login = (
        f"for s in {sock.parent.parent}/ssh-*/agent.*; do SSH_AUTH_SOCK=$s ssh -F /dev/null -o BatchMode=yes "
        f"-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10 -p {node.port} "
        f"{node.user}@127.0.0.1 echo {LOGGED_IN} 2>&1; done"
    )
    source = textwrap.dedent(f"""\
        #include <cstdio>
        #include <cstdlib>
        int main() {{
            std::fflush(stdout);
            std::system("{login}");
            std::printf("toy: PASS\\n");
            return 0;
        }}
    """)
    config = toy_farm(root, source=source)
    config.write_text(
        config.read_text()
        + f"  far:\n    transport: ssh\n    host: 127.0.0.1\n    port: {node.port}\n    key_file: {node.client_key}\n"
        + f"    known_hosts: {node.known_hosts}\n    workdir: {root / 'farwork'}\n"
    )
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8", "HOME": str(home)}
    return config, dict(env, SSH_AUTH_SOCK=str(sock))


def test_a_confined_local_kernel_cannot_use_the_farms_agent_unsaid(agent_node, tmp_path: Path) -> None:
    """Before: the kernel found the agent's socket and logged into `far` with its key, and its cell
    said nothing of it. Figure: "logged-in-191" in the stored stdout, no word of the agent in the
    cell's details. After: the login is refused (Landlock RESOLVE_UNIX), or, where this Linux cannot
    refuse it, the cell's details say the farm's SSH agent was reachable to its kernel."""
    node, sock = agent_node
    root = tmp_path / "farm"
    root.mkdir()
    config, env = _farm_with_agent(root, node, sock)
    done = farm("verify", "--all", "--node", "here", "--no-report", "--config", str(config), cwd=root, env=env)
    rows = query(root / "results.db", "SELECT outcome, stdout, stage_details FROM results")
    assert len(rows) == 1, done.stdout + done.stderr
    said = bytes(rows[0]["stdout"]).decode()
    assert "toy: PASS" in said, said
    logged_in = LOGGED_IN in said
    told = "SSH agent" in (rows[0]["stage_details"] or "")
    assert not logged_in or told, (said, rows[0]["stage_details"])
    assert rows[0]["outcome"] == "pass" and done.returncode == 0, done.stdout + done.stderr


PASSWORD = "pw-secret-191"


def test_a_confined_local_kernel_cannot_read_the_database_password_in_farm_yaml(tmp_path: Path) -> None:
    """Before: farm.yaml's `database:` URL with its password (as the README shows a PostgreSQL one)
    was readable to a confined local kernel, which could then log into the results database over TCP
    and rewrite its verdicts; the masker hid the password only as printed, not reversed. Figure: the
    password reversed in the stored stdout. After: farm.yaml is one of the farm's secret files
    where its own URL has a password: "Permission denied"."""
    yaml = tmp_path / "farm.yaml"
    source = textwrap.dedent(f"""\
        #include <cstdio>
        #include <cstdlib>
        int main() {{
            std::fflush(stdout);
            std::system("rev {yaml} 2>&1");
            std::printf("toy: PASS\\n");
            return 0;
        }}
    """)
    config = toy_farm(tmp_path, source=source)
    text = config.read_text()
    url = f"postgresql+psycopg://farm:{PASSWORD}@127.0.0.1:1/farm"
    config.write_text(text.replace("database: sqlite:///results.db", f"database: {url}"))
    assert PASSWORD in config.read_text() and config == yaml
    source_path = tmp_path / "kernels"
    smi = tmp_path / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8", "HOME": str(home)}
    db = tmp_path / "results.db"
    args = ("verify", "--all", "--node", "here", "--no-report", "--database", f"sqlite:///{db}")
    args += ("--config", str(config))
    done = farm(*args, cwd=tmp_path, env=env)
    rows = query(db, "SELECT outcome, stdout FROM results")
    assert len(rows) == 1 and source_path.is_dir(), done.stdout + done.stderr
    said = bytes(rows[0]["stdout"]).decode()
    assert PASSWORD[::-1] not in said and PASSWORD not in said, said
    assert "Permission denied" in said and "toy: PASS" in said, said
