"""Red-team round 105: credentials a kernel (or a build) printed were published.

A node's `env:` carries what its operator hands every command (license tokens, proxy passwords,
HF_TOKEN, NGC_API_KEY). Round 99 kept the values off the node's command lines, but a kernel that
printed its environment (`env`, a crash handler's dump) still put them in results.db, the run's
journal, its cell's page, the JSON and JUnit exports and `farm show`. The values of credential-named
entries, and of those farm.yaml's `secret_env:` names, are masked as *** in every copy the farm keeps
now; the markers are still matched on what the kernel really printed."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import Fleet, query, standin_job, standin_variant
from test_redteam99 import everything_written
from test_verdicts import run

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError


def _published(config: Path, tmp_path: Path) -> bytes:
    """All the farm writes where others read: the site, the JSON and JUnit exports, `farm show`,
    and the store and journal themselves."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    shown = farm("show", "1", "--config", str(config), env=env)
    site = farm("report", "--run", "1", "--out", str(tmp_path / "site"), "--config", str(config), env=env)
    as_json = farm("report", "--format", "json", "--config", str(config), env=env)
    junit = farm("report", "--format", "junit", "--config", str(config), env=env)
    for done in (shown, site, as_json, junit):
        assert done.returncode == 0, done.stdout + done.stderr
    kept = [everything_written(path) for path in tmp_path.iterdir() if path.is_dir() and path.name != "work"]
    kept.append((tmp_path / "results.db").read_bytes())
    return b"\n".join([*kept, *(d.stdout.encode() + d.stderr.encode() for d in (shown, as_json, junit))])


def test_a_kernel_printing_its_env_publishes_no_credential(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A kernel dumps its environment on stdout and a token on stderr (its last line, which reasons
    quote): every credential-named value, a proxy URL's password and a `secret_env:` value are ***
    everywhere the farm keeps or shows output; plain settings and short values are left as printed,
    and the cell page and JSON say how many were masked."""
    hf = "hf_" + secrets.token_hex(12)
    ngc = "ngc-" + secrets.token_hex(12)
    proxy_pw = "pw" + secrets.token_hex(8)
    license_value = "27000@lic-" + secrets.token_hex(6)
    env = {
        "HF_TOKEN": hf,
        "NGC_API_KEY": ngc,
        "HTTPS_PROXY": f"http://farm:{proxy_pw}@proxy.example.org:3128",
        "LM_LICENSE_FILE": license_value,  # not credential-named: marked by secret_env
        "KEYBOARD": "layout-us-intl",  # KEY in a word is no credential
        "SHORT_TOKEN": "ab12",  # too short to mask: would mangle output
    }
    prelude = tmp_path / "show.sh"
    prelude.write_text('env | sed "s/^/ENV /"; echo "auth failed with $HF_TOKEN" >&2\n')
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env=env, secret_env=["LM_LICENSE_FILE"])
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {"v": variant})])
    _, summary = run(config)
    assert summary.outcomes == {"pass": 1}, summary.outcomes
    (row,) = query(tmp_path / "results.db", "SELECT * FROM results")
    stdout = bytes(row["stdout"])
    assert b"ENV HF_TOKEN=***" in stdout and b"ENV NGC_API_KEY=***" in stdout, stdout
    assert b"ENV HTTPS_PROXY=http://farm:***@proxy.example.org:3128" in stdout, stdout
    assert b"ENV LM_LICENSE_FILE=***" in stdout, stdout
    assert b"ENV KEYBOARD=layout-us-intl" in stdout and b"ENV SHORT_TOKEN=ab12" in stdout, stdout
    assert row["last_stderr_line"] == "auth failed with ***", row["last_stderr_line"]
    # what the kernel printed, sized and hashed as it printed it: the masked copy is what is shown
    assert row["stdout_size"] > len(stdout), (row["stdout_size"], len(stdout))
    masked = json.loads(row["stage_details"])["masked"]
    assert masked["count"] == 5 and "5 occurrences" in masked["detail"], masked
    written = _published(config, tmp_path)
    for secret in (hf, ngc, proxy_pw, license_value):
        assert secret.encode() not in written, secret
    page = (tmp_path / "site" / "cells" / "1.html").read_text()
    assert "5 occurrences of secret values" in page and "ENV HF_TOKEN=***" in page, page
    assert b'"output_masked": 5' in written  # the JSON export's count


def test_a_pass_marker_is_judged_on_what_the_kernel_printed(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """Masking never makes or breaks a marker's match: a job whose pass marker is `***` does not
    pass on a kernel that printed a token (its masked copy holds ***), and one whose marker's line
    holds a secret still passes (its masked copy has no marker)."""
    token = "tok-" + secrets.token_hex(10)
    prelude = tmp_path / "show.sh"
    prelude.write_text(f'echo "key {token}"\n')
    variant = standin_variant("FAILNUM", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    stars = standin_job("stars", {"v": variant}, pass_marker=r"^key \*\*\*$")
    own = standin_job("own", {"v": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)})
    own["pass_marker"] = f"^key {token}$"
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"VENDOR_TOKEN": token})
    config = make_farm(tmp_path, {"t4": node}, [stars, own])
    run(config)
    got = {r["kernel"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert got["own"]["outcome"] == "pass", got["own"]["reason"]
    assert got["stars"]["outcome"] != "pass", got["stars"]["reason"]
    for row in got.values():
        assert bytes(row["stdout"]).startswith(b"key ***\n"), bytes(row["stdout"])
        assert token not in row["reason"], row["reason"]


def test_a_value_split_by_the_kept_copys_cut_is_masked_each_side() -> None:
    """A long stream's kept copy is its head and tail: a value the cut went through shows neither
    half, and the cut's offsets stay those of what the kernel printed."""
    from orchestrator.output_secrets import Masker
    from orchestrator.run.streams import scan_bytes

    value = "SECRET" + "x" * 20 + "END"
    stream = b"a" * 90 + value.encode() + b"b" * 200 + value.encode() + b"c" * 95
    got = scan_bytes(stream, {}, cap=200)
    masker = Masker([value])
    kept = masker.kept(got.kept, got.cut, got.size)
    assert value[:4].encode() not in kept and value[-4:].encode() not in kept, kept
    assert kept.startswith(b"a" * 90 + b"***\n[farm:") and kept.endswith(b"***" + b"c" * 95), kept
    assert masker.count == 2


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("NGC_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("PGPASSWORD", True),
        ("GITHUB_PAT", True),
        ("MY_AUTH", True),
        ("DOCKER_CREDENTIALS", True),
        ("CUDA_VISIBLE_DEVICES", False),
        ("KEYBOARD", False),
        ("MONKEY_PATH", False),
        ("CUDA_CACHE_DISABLE", False),
        ("LD_LIBRARY_PATH", False),
        ("PWD", False),
    ],
)
def test_which_names_read_as_credentials(name: str, secret: bool) -> None:
    from orchestrator.output_secrets import secret_name

    assert secret_name(name) is secret


def test_a_url_password_in_any_value_is_masked() -> None:
    from orchestrator.output_secrets import env_secrets

    assert env_secrets({"HTTP_PROXY": "http://u:hunter22@p:8080", "CUDA_CACHE_DISABLE": "1"}) == ["hunter22"]


def test_secret_env_names_an_entry_of_env(tmp_path: Path, make_farm) -> None:
    """A `secret_env:` name not in `env:` (a typo) would mask nothing: an error naming the file and key."""
    node = {"transport": "local", "env": {"LM_LICENSE_FILE": "27000@lic"}, "secret_env": ["LM_LICENCE_FILE"]}
    config = make_farm(tmp_path, {"box": node}, [])
    with pytest.raises(ConfigError) as err:
        load_farm(config)
    said = str(err.value)
    assert "farm.yaml" in said and "secret_env" in said and "LM_LICENCE_FILE" in said, said
    assert "LM_LICENSE_FILE" in said, said  # what was expected: the names in env
    node["secret_env"] = "LM_LICENSE_FILE"  # one name, not a list of them
    config = make_farm(tmp_path, {"box": node}, [])
    with pytest.raises(ConfigError) as err:
        load_farm(config)
    assert "secret_env" in str(err.value) and "list" in str(err.value), str(err.value)


def test_a_reason_quoting_a_secret_is_masked_in_the_store_and_the_runs_own_lines(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A crash's reason quotes the kernel's last stderr line: stored, and printed by `farm verify`
    (a CI log), it shows *** for the token that line held."""
    token = "tok-" + secrets.token_hex(10)
    prelude = tmp_path / "show.sh"
    # the kernel killed once it said so (SIGPIPE: no shell says "Killed" after it): its line is the last
    prelude.write_text('echo "login refused for $VENDOR_TOKEN" >&2; kill -PIPE $PPID $(ps -o ppid= -p $PPID)\n')
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"VENDOR_TOKEN": token})
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {"v": variant})])
    done = farm("verify", "--all", "--config", str(config), env=dict(os.environ))
    (row,) = query(tmp_path / "results.db", "SELECT reason, last_stderr_line FROM results")
    assert row["last_stderr_line"] == "login refused for ***", row["last_stderr_line"]
    assert "login refused for ***" in row["reason"], row["reason"]
    assert "login refused for ***" in done.stdout + done.stderr, done.stdout + done.stderr
    assert token not in done.stdout + done.stderr + row["reason"], done.stdout
