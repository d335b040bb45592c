"""Red-team round 106: round 105's masking and round 104's waiver flag, where they had not reached.

Round 105 masked a node's `env:` credentials in every record the farm keeps; the line the run prints
when a node's probe fails (the terminal, `--log`, `--quiet`'s causes, `farm nodes`) still quoted
them, `SSH_AUTH_SOCK` (a socket's path) was masked as a credential, and no test said a build log
echoing a token is masked. Round 104's `cuda_error_text: expected` waiver was flagged in the index
matrix, exports, ledger and certificate, but not in the run page's matrix or the kernel page's
history grid, where a reviewer reading those saw a plain pass."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from farm_cli import farm
from nodes import Fleet, query, standin_job, standin_variant
from test_redteam99 import everything_written, postgres_database  # noqa: F401 - a fixture
from test_verdicts import run

from orchestrator.config.farm import load_farm
from orchestrator.errors import ConfigError


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}


def _nvcc_saying(tmp_path: Path, line: str) -> Path:
    """An nvcc wrapper that refuses with `line` (a license check quoting the node's token)."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text(f'#!/bin/sh\necho "{line}" >&2\nexit 1\n')
    nvcc.chmod(0o755)
    return nvcc


def _published(config: Path, tmp_path: Path) -> bytes:
    """As test_redteam105's, for a run with a failure in it (the exports exit 1, not 0)."""
    said = [
        farm("show", "1", "--config", str(config), env=_env()),
        farm("report", "--run", "1", "--out", str(tmp_path / "site"), "--config", str(config), env=_env()),
        farm("report", "--format", "json", "--config", str(config), env=_env()),
        farm("report", "--format", "junit", "--config", str(config), env=_env()),
    ]
    for done in said:
        assert done.returncode in (0, 1) and done.stdout, done.stdout + done.stderr
    kept = [everything_written(path) for path in tmp_path.iterdir() if path.is_dir() and path.name != "work"]
    kept.append((tmp_path / "results.db").read_bytes())
    return b"\n".join([*kept, *(d.stdout.encode() + d.stderr.encode() for d in said)])


# ------------------------------------------------------------------ A1: a node's error, as printed


def test_a_failed_probes_error_is_masked_where_the_run_prints_it(make_farm, tmp_path: Path) -> None:
    """A node whose nvcc wrapper refuses quoting the node's token: the line `farm verify` prints for
    the node (terminal and --log), --quiet's cause line and `farm nodes` show ***, as the store does."""
    token = "lic-" + secrets.token_hex(10)
    nvcc = _nvcc_saying(tmp_path, "license refused for $VENDOR_TOKEN")
    node = {"transport": "local", "nvcc": str(nvcc), "env": {"VENDOR_TOKEN": token}, "workdir": str(tmp_path / "w")}
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75")
    config = make_farm(tmp_path, {"box": node}, [standin_job("standin", {"v": variant})], retries=0)
    log = tmp_path / "farm.log"
    done = farm("verify", "--all", "--no-report", "--log", str(log), "--config", str(config), env=_env())
    quiet = farm("verify", "--all", "--no-report", "--quiet", "--config", str(config), env=_env())
    nodes = farm("nodes", "--config", str(config), env=_env())
    (row, _) = query(tmp_path / "results.db", "SELECT reason FROM results ORDER BY id")
    assert "license refused for ***" in row["reason"], row["reason"]
    printed = {
        "verify": done.stdout + done.stderr,
        "log": log.read_text(),
        "quiet": quiet.stdout + quiet.stderr,
        "nodes": nodes.stdout + nodes.stderr,
    }
    for where, text in printed.items():
        assert token not in text, (where, text)
        assert "license refused for ***" in text, (where, text)
    # --quiet says each node's cause once: the node's line and its cells' reasons are the same text
    assert quiet.stdout.count("license refused for ***") == 1, quiet.stdout


# ------------------------------------------------------------------ A2: a socket's path is no secret


@pytest.mark.parametrize(
    ("name", "secret"),
    [("SSH_AUTH_SOCK", False), ("GPG_AGENT_SOCK", False), ("VAULT_AUTH_SOCKET", False), ("SOCK_TOKEN", True)],
)
def test_a_sockets_path_is_not_read_as_a_credential(name: str, secret: bool) -> None:
    from orchestrator.output_secrets import secret_name

    assert secret_name(name) is secret


def test_plain_env_shows_a_value_the_matcher_flags_and_secret_env_still_wins() -> None:
    from orchestrator.output_secrets import env_secrets

    env = {
        "LICENSE_AUTH_HOST": "lic01.example.org",
        "HF_TOKEN": "hf_abcdefgh",
        "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1",
        "PROXY_AUTH": "http://u:hunter22@p:8080",
    }
    assert env_secrets(env, plain=["LICENSE_AUTH_HOST", "PROXY_AUTH"]) == ["hf_abcdefgh", "hunter22"]
    assert env_secrets(env, declared=["SSH_AUTH_SOCK"], plain=["LICENSE_AUTH_HOST"]) == [
        "hf_abcdefgh",
        "/tmp/ssh-XXXX/agent.1",
        "http://u:hunter22@p:8080",
    ]


@pytest.mark.parametrize(
    ("plain", "said"),
    [
        (["LICENSE_AUTH_HOTS"], "'LICENSE_AUTH_HOTS' is not one"),  # a typo
        (["CUDA_CACHE_DISABLE"], "'CUDA_CACHE_DISABLE' is not one"),  # never masked: exempts nothing
        (["HF_TOKEN"], "'HF_TOKEN' is also in secret_env"),
        ("LICENSE_AUTH_HOST", "list"),
    ],
)
def test_plain_env_names_a_flagged_entry_of_env(tmp_path: Path, make_farm, plain: object, said: str) -> None:
    """An exemption that changes nothing (a typo, a name never masked, one secret_env also names)
    is an error naming the file, the key and what it takes."""
    env = {"LICENSE_AUTH_HOST": "lic01.example.org", "HF_TOKEN": "hf_abcdefgh", "CUDA_CACHE_DISABLE": "1"}
    node = {"transport": "local", "env": env, "secret_env": ["HF_TOKEN"], "plain_env": plain}
    config = make_farm(tmp_path, {"box": node}, [])
    with pytest.raises(ConfigError) as err:
        load_farm(config)
    text = str(err.value)
    assert "farm.yaml" in text and "plain_env" in text and said in text, text
    if said != "list":
        assert "LICENSE_AUTH_HOST" in text and "hf_abcdefgh" not in text, text  # expected: the flagged names


def test_plain_env_is_shown_in_kept_output(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A kernel printing SSH_AUTH_SOCK and an exempted LICENSE_AUTH_HOST shows both as set; its
    token next to them is still ***."""
    token = "tok-" + secrets.token_hex(10)
    env = {"SSH_AUTH_SOCK": "/tmp/ssh-abcdef/agent.42", "LICENSE_AUTH_HOST": "lic01.example.org", "HF_TOKEN": token}
    prelude = tmp_path / "show.sh"
    prelude.write_text('echo "sock $SSH_AUTH_SOCK host $LICENSE_AUTH_HOST token $HF_TOKEN"\n')
    variant = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude)
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env=env, plain_env=["LICENSE_AUTH_HOST"])
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {"v": variant})])
    _, summary = run(config)
    assert summary.outcomes == {"pass": 1}, summary.outcomes
    (row,) = query(tmp_path / "results.db", "SELECT stdout FROM results")
    assert b"sock /tmp/ssh-abcdef/agent.42 host lic01.example.org token ***\n" in bytes(row["stdout"])


# ------------------------------------------------------------------ A3: a build log echoing a token


def test_a_build_log_echoing_a_token_is_masked(ssh_fleet: Fleet, make_farm, tmp_path: Path) -> None:
    """A build command that echoes the node's token (`echo $HF_TOKEN; ...`), for a build that
    passes and one that fails: its log and the failed build's reason show ***, nowhere the token."""
    token = "hf_" + secrets.token_hex(12)
    good = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75")
    good["build"] = f'echo "using $HF_TOKEN"; {good["build"]}'
    bad = standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75")
    bad["build"] = 'echo "error: token $HF_TOKEN refused" >&2; false {sources} {binary}'
    node = ssh_fleet["t4"].farm_entry(tmp_path / "work", env={"HF_TOKEN": token})
    config = make_farm(tmp_path, {"t4": node}, [standin_job("standin", {"good": good, "bad": bad})])
    run(config)
    rows = {r["variant"]: r for r in query(tmp_path / "results.db", "SELECT * FROM results")}
    assert rows["good"]["outcome"] == "pass", rows["good"]["reason"]
    assert b"using ***" in bytes(rows["good"]["build_log"]), bytes(rows["good"]["build_log"])
    assert b"error: token *** refused" in bytes(rows["bad"]["build_log"]), bytes(rows["bad"]["build_log"])
    assert token not in rows["bad"]["reason"], rows["bad"]["reason"]
    assert token.encode() not in _published(config, tmp_path)


# ------------------------------------------------------------------ B: the waiver on run pages and history grids


def _row(page: str, start: str) -> str:
    return page[page.index(start) :].split("</tr>")[0]


def test_a_waived_pass_is_flagged_on_run_pages_and_the_kernels_history_grid(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """The run page's matrix (linked, and an earlier run's unlinked one) and the kernel page's
    history grid flag a waived pass in the index matrix's words; a strict pass beside it is not."""
    from click.testing import CliRunner

    from orchestrator.cli import main
    from orchestrator.cuda_waiver import FLAG
    from orchestrator.store.database import Store

    prelude = tmp_path / "demo.sh"
    prelude.write_text('echo "CUDA error at demo.cu:12: an illegal memory access was encountered" >&2\n')
    variants = {
        "demo": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75", prelude=prelude, cuda_error_text="expected"),
        "plain": standin_variant("PASS", {"min": "7.5"}, "MIN_CC=75"),
    }
    root = tmp_path / "farm"
    config = make_farm(root, {"t4": ssh_fleet["t4"].farm_entry(tmp_path / "work")}, [standin_job("standin", variants)])
    run(config)
    run(config)
    found = {(r["run_id"], r["variant"]): r["id"] for r in query(root / "results.db", "SELECT * FROM results")}
    assert Store(f"sqlite:///{root / 'results.db'}").waived_results([1, 2]) == {found[1, "demo"], found[2, "demo"]}
    site = tmp_path / "site"  # a fresh folder: run 1's page is rendered too, unlinked
    done = CliRunner().invoke(main, ["report", "--run", "2", "--out", str(site), "--config", str(config)])
    assert done.exit_code == 0, done.output

    own = (site / "runs" / "2.html").read_text()
    assert FLAG in _row(own, "<th>standin : demo</th>") and FLAG not in _row(own, "<th>standin : plain</th>"), own
    earlier = (site / "runs" / "1.html").read_text()
    demo_cell = earlier[earlier.index(f'title="result {found[1, "demo"]}"') :].split("</td>")[0]
    plain_cell = earlier[earlier.index(f'title="result {found[1, "plain"]}"') :].split("</td>")[0]
    assert FLAG in demo_cell and FLAG not in plain_cell, earlier
    grid = (site / "kernels" / "standin.html").read_text()
    grid = grid[grid.index('id="kernel-history"') :]
    assert _row(grid, "<th>demo @ t4</th>").count(FLAG) == 2, grid  # both runs' passes
    assert FLAG not in _row(grid, "<th>plain @ t4</th>"), grid


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_waived_results_reads_only_waived_passes(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """The run pages' query, on both databases: a waived pass is listed; a strict pass, and a
    fail whose expectation holds the waiver, are not."""
    import dataclasses

    from test_records import full_result

    from orchestrator.cuda_waiver import NOTE
    from orchestrator.store.database import Store

    url = request.getfixturevalue("postgres_database") if backend == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    store = Store(url)
    fields = {"token": "t", "trigger": "t", "farm_version": "t", "host": "h", "config_file": "f", "selection": "s"}
    planned = [("k", v, "a", "") for v in ("waived", "strict", "failed")]
    run_id = store.begin_run(planned=planned, **fields)
    ids = {}
    # the flag is results.cuda_waived (0015); NOTE stays in the reason, the words shown
    for variant, outcome, waived in [("waived", "pass", True), ("strict", "pass", False), ("failed", "fail", True)]:
        base = full_result(run_id, None)
        said = f"CC 7.5 satisfies >=7.5; {NOTE if waived else ''}"
        record = dataclasses.replace(
            base, kernel="k", variant=variant, node="a", outcome=outcome, expected_reason=said, cuda_waived=waived
        )
        ids[variant] = store.add_result(record)
    assert store.waived_results([run_id]) == {ids["waived"]}
    assert store.waived_results([]) == set()
