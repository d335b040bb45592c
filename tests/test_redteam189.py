"""Red-team round 189: a confined kernel of a `local` node (the farm's own machine, the farm's user)
reading the farm's secrets: another node's SSH `key_file`, the farm's `~/.pgpass` and `~/.ssh`.

Broke (before/after): Landlock confined its writes only, so it read them all, printed them, and the
key's text was stored with its cell (results.db) and shown on its pages. Now a local node's stages
run under a ruleset that handles reads too (readable.py): everything is readable but the farm's
secret files (read_rules), and the key files' lines are masked in what the farm stores.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from farm_cli import farm
from nodes import CARDS, nvidia_smi_script, query
from toyfarm import toy_farm

from orchestrator import output_secrets

KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQFARNODEKEY\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
PGPASS = "localhost:5432:*:farm:pgpass-secret-189\n"
OWN_KEY = "ownkey-secret-189-AAAAC3NzaC1lZDI1NTE5\n"


def _farm_with_secrets(root: Path) -> tuple[Path, dict[str, str]]:
    """The toy farm on its local node (a T4 stand-in) whose kernel cats the secrets, beside an SSH
    node `far` whose key_file is in the farm's folder; HOME holds a .pgpass and a .ssh key."""
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".pgpass").write_text(PGPASS)
    (home / ".pgpass").chmod(0o600)
    (home / ".ssh" / "id_ed25519").write_text(OWN_KEY)
    (root / "keys").mkdir()
    key = root / "keys" / "far_key"
    key.write_text(KEY)
    key.chmod(0o600)
    cats = " ".join(str(p) for p in (key, home / ".pgpass", home / ".ssh" / "id_ed25519"))
    source = textwrap.dedent(f"""\
        #include <cstdio>
        #include <cstdlib>
        int main() {{
            std::system("for f in {cats}; do cat $f 2>&1; done; cat /etc/hostname >/dev/null && echo etc-read");
            std::printf("toy: PASS\\n");
            return 0;
        }}
    """)
    config = toy_farm(root, source=source)
    config.write_text(
        config.read_text()
        + f"  far:\n    transport: ssh\n    host: 127.0.0.1\n    port: 1\n    key_file: {key}\n"
        + "    workdir: /tmp/far\n"
    )
    smi = root / "smi" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(nvidia_smi_script(CARDS["t4"]))
    smi.chmod(0o755)
    return config, {"PATH": f"{smi.parent}:{os.environ['PATH']}", "LANG": "C.UTF-8", "HOME": str(home)}


def test_a_confined_local_kernel_reads_no_farm_secret_and_none_is_stored(tmp_path: Path) -> None:
    """Before: the kernel printed another node's key_file, ~/.pgpass and ~/.ssh/id_ed25519, and its
    cell's stored stdout held them. Figure: "ARNODEKEY", "pgpass-secret-189" and "ownkey-secret-189"
    in results.stdout. After: each cat says Permission denied; the kernel still reads its binary,
    its libraries and /etc and passes."""
    config, env = _farm_with_secrets(tmp_path)
    done = farm("verify", "--all", "--node", "here", "--no-report", "--config", str(config), cwd=tmp_path, env=env)
    rows = query(tmp_path / "results.db", "SELECT outcome, stdout FROM results")
    assert len(rows) == 1, done.stdout + done.stderr
    said = bytes(rows[0]["stdout"]).decode()
    for secret in ("ARNODEKEY", "pgpass-secret-189", "ownkey-secret-189"):
        assert secret not in said, said
    assert said.count("Permission denied") == 3, said
    assert "etc-read" in said and "toy: PASS" in said, said
    assert rows[0]["outcome"] == "pass", said
    assert done.returncode == 0, done.stdout + done.stderr
    db = (tmp_path / "results.db").read_bytes()
    assert b"ARNODEKEY" not in db and b"pgpass-secret-189" not in db


def test_a_key_files_lines_are_masked_in_what_is_stored(tmp_path: Path) -> None:
    """Before: the masker knew env values and the database URL's only: a key file's text a kernel
    printed (unconfined: the shell runner, no Landlock) was kept as printed. Figure: the PEM body line
    unmasked. After: each of a node key_file's lines is a secret (key_file_secrets)."""
    key = tmp_path / "far_key"
    key.write_text(KEY)
    masker = output_secrets.Masker((), output_secrets.key_file_secrets([str(key), str(tmp_path / "missing")]))
    printed = b"x\n" + KEY.encode() + b"y\n"
    masked = masker.data(printed)
    assert b"ARNODEKEY" not in masked and b"BEGIN OPENSSH" not in masked, masked
    assert masked.count(b"\n") == printed.count(b"\n") and masker.count >= 1
