"""Red-team round 44: bad input to the configuration read as something else than what it says,
or refused without naming the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_config import GOOD_JOB, load_error, make_farm

from orchestrator.config.farm import load_farm


@pytest.mark.parametrize(
    ("where", "written", "key"),
    [
        ("farm", "    build_jobs: 010\n", "nodes.local.build_jobs"),
        ("farm", "    connect_timeout: 030\n", "nodes.local.connect_timeout"),
        ("farm", "    gpus: [0, 010]\n", "nodes.local.gpus[1]"),
        ("job", "    instructions: {HMMA: 010}\n", "variants.v1.instructions.HMMA"),
        ("job", "    timeout: 1:30\n", "variants.v1.timeout"),
    ],
)
def test_a_number_yaml_reads_as_octal_or_base_60_is_refused_by_its_key(tmp_path: Path, where, written, key) -> None:
    """YAML 1.1 reads `010` as octal 8 and `1:30` as 90: `build_jobs: 010` ran 8 builds,
    `instructions: {HMMA: 010}` asked for 8, and nothing said so. Refused, naming the key."""
    farm = "database: sqlite:///results.db\nnodes:\n  local:\n    transport: local\n"
    if where == "farm":
        config = make_farm(tmp_path, farm=farm + written)
    else:
        config = make_farm(tmp_path, farm=farm, job=GOOD_JOB + written)
    err = load_error(config)
    assert err.file.endswith("farm.yaml" if where == "farm" else "k.yaml")
    assert err.key == key
    assert "decimal" in err.expected


@pytest.mark.parametrize("written", ["8.10", "7.50", "8.00"])
def test_an_unquoted_capability_with_two_digits_after_the_dot_is_refused_as_the_quoted_one_is(
    tmp_path: Path, written: str
) -> None:
    """`cc: {min: 8.10}` loaded as 8.1 (YAML's float drops the zero), while "8.10" quoted is
    refused: the contract admitted cards its author did not write. Refused either way."""
    config = make_farm(tmp_path, job=GOOD_JOB.replace('cc: {min: "7.5"}', f"cc: {{min: {written}}}"))
    err = load_error(config)
    assert err.file.endswith("k.yaml")
    assert err.key == "variants.v1.cc.min"
    assert written in err.found
    farm = make_farm(tmp_path, farm=f"nodes:\n  local:\n    transport: local\n    cc: {written}\n")
    err = load_error(farm)
    assert err.key == "nodes.local.cc"
    assert written in err.found


def test_an_unquoted_capability_of_one_digit_after_the_dot_still_loads(tmp_path: Path) -> None:
    config = make_farm(tmp_path, job=GOOD_JOB.replace('cc: {min: "7.5"}', "cc: {min: 7.5}"))
    assert str(load_farm(config).jobs["k"].spec.variants["v1"].cc.contract()) == "CC >= 7.5"


def test_a_job_file_yaml_cannot_read_is_not_told_as_no_job_file(tmp_path: Path) -> None:
    """jobs/k.yaml with a YAML mistake gave, after its own error, kernels/k.cu's 'a header
    with no Build: line (and no job file)': a second error, on the wrong file, saying the
    job file the user is editing is not there. The job file's error alone."""
    config = make_farm(tmp_path, job=GOOD_JOB + "    instructions: {HMMA: 1\n")
    err = load_error(config)
    errors = getattr(err, "errors", [err])
    assert [e.file for e in errors] == [str(tmp_path / "jobs" / "k.yaml")]
    assert "malformed YAML" in errors[0].found


@pytest.mark.parametrize(
    ("record", "key", "value"),
    [
        ("planned", "cells", "x"),
        ("planned", "cells", [["toy", "plain"]]),
        ("planned", "cells", [[1, 2, 3, 4]]),
        ("result", "exit_code", 10**30),
        ("attempt", "attempt", 2**64),
    ],
)
def test_a_forged_journal_is_refused_as_a_journal_not_a_bug_in_farm(tmp_path: Path, record, key, value) -> None:
    """`farm import` of a journal whose planned cells were not (kernel, variant, node, device)
    lists, or with a number past SQLite's 64 bits, was 'internal error (ValueError: not
    enough values to unpack)' / '(OverflowError ...)', exit 70: a bug in farm. Now the
    journal's own error (exit 5), naming the file and record, and the database untouched."""
    import json

    from click.testing import CliRunner
    from toyfarm import toy_farm

    from orchestrator.cli import main

    config = toy_farm(tmp_path / "farm")
    assert CliRunner().invoke(main, ["verify", "--all", "--no-report", "--config", str(config)]).exit_code == 0
    (journal,) = (tmp_path / "farm" / "results.db.journal").glob("*.jsonl")
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    for line in lines:
        if line["kind"] == record:
            line[key] = value
    forged = tmp_path / "forged.jsonl"
    forged.write_text("".join(json.dumps(line) + "\n" for line in lines))
    database = tmp_path / "other.db"
    args = ["import", "--config", str(config), "--database", f"sqlite:///{database}", str(forged)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 5, result.output
    assert "bug in farm" not in result.output
    assert str(forged) in result.output and record in result.output
    if database.exists():
        import sqlite3

        with sqlite3.connect(database) as db:
            assert db.execute("select count(*) from runs").fetchone() == (0,)


@pytest.mark.parametrize("needs", ["8.10", "0.5", "100.0"])
def test_a_headers_label_with_a_capability_not_written_major_minor_is_a_config_error(
    tmp_path: Path, needs: str
) -> None:
    """`// Build (needs CC 8.10): nvcc ...` was 'internal error (ValueError: a compute
    capability written major.minor ...)', exit 70. Now the header's line and what it expects."""
    config = make_farm(tmp_path, job=None)
    (tmp_path / "kernels" / "k.cu").write_text(
        f"// Build (needs CC {needs}): nvcc -O3 -arch=sm_80 -o k k.cu\nint main() {{ return 0; }}\n"
    )
    err = load_error(config)
    assert err.file == str(tmp_path / "kernels" / "k.cu")
    assert err.key == "line 1, Build"
    assert needs in err.found and "major.minor" in err.expected


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("reports", '"a\\0b"'),
        ("journal", '"a\\0b"'),
        ("database", '"sqlite:///a\\0b.db"'),
        ("reports", "'~no_such_user_rt44/site'"),
        ("journal", "'~no_such_user_rt44/journal'"),
    ],
)
def test_a_farm_path_no_file_can_have_is_a_config_error(tmp_path: Path, key: str, value: str) -> None:
    """farm.yaml's `reports`, `journal` or `database` with a NUL, or a `~user` this machine has
    no home for, was 'internal error (ValueError: embedded null byte)' or '(RuntimeError:
    Could not determine home directory.)', exit 70. Now a ConfigError on farm.yaml's key."""
    config = make_farm(tmp_path, farm=f"{key}: {value}\nnodes:\n  local:\n    transport: local\n")
    err = load_error(config)
    assert err.file == str(config)
    assert err.key == key


@pytest.mark.parametrize(
    "url", ["''", "' sqlite:///results.db'", "'results.db'", "'postgresql+psycopg://farm:secret@db:54321x/farm'"]
)
def test_a_database_url_that_is_no_url_names_farm_yaml_and_its_key(tmp_path: Path, url: str) -> None:
    """`database: ''` (or a blank before sqlite://) was refused only when the store opened it:
    'the results database URL '' cannot be read', naming neither farm.yaml nor `database`."""
    config = make_farm(tmp_path, farm=f"database: {url}\nnodes:\n  local:\n    transport: local\n")
    err = load_error(config)
    assert err.file == str(config)
    assert err.key == "database"
    assert "secret" not in str(err)


def test_a_float_kept_as_written_copies_pickles_and_dumps_as_a_float() -> None:
    """The loader's WrittenFloat (a float with its text) goes wherever a float did: deepcopy and
    pickle made none (its constructor needs the text), and yaml.safe_dump refused it."""
    import copy
    import pickle

    import yaml

    from orchestrator.config.yaml_file import WrittenFloat

    value = WrittenFloat(0.5, "0.50")
    for made in (copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert made == 0.5 and made.written == "0.50"
    assert yaml.safe_load(yaml.safe_dump({"tolerance": value})) == {"tolerance": 0.5}


@pytest.mark.parametrize("workdir", ["~farm/work", "~"])
def test_a_work_folder_of_another_users_home_is_refused_by_its_key(tmp_path: Path, workdir: str) -> None:
    """Only `~/` expands on the node: `workdir: ~farm/work` made a folder named `~farm` in the
    login's home and ran there. Refused, naming the node's key; `~/work` still loads."""
    farm = f"database: sqlite:///results.db\nnodes:\n  local:\n    transport: local\n    workdir: '{workdir}'\n"
    err = load_error(make_farm(tmp_path, farm=farm))
    assert err.file.endswith("farm.yaml")
    assert err.key == "nodes.local.workdir"
    assert "~user" in err.expected
    loaded = load_farm(make_farm(tmp_path, farm=farm.replace(f"'{workdir}'", "'~/work'")))
    assert loaded.nodes["local"].workdir == "~/work"


@pytest.mark.parametrize(
    ("journal", "found"),
    [
        ("farm.yaml", "which is a file"),
        ("farm.yaml/j", "farm.yaml is a file"),
        ("kernels", "which is the farm's `kernels` folder"),
        ("reports/journal", "the farm's `reports` folder"),
    ],
)
def test_a_journal_folder_that_is_a_file_or_the_farms_own_folder_is_refused(tmp_path: Path, journal, found) -> None:
    """`journal: farm.yaml` loaded, and every run then failed at its start telling the user
    to move farm.yaml away; `journal: reports` put the runs' journals (their outputs) on the
    reviewers' site, `journal: kernels` among the course's sources. Refused by the key."""
    farm = f"database: sqlite:///results.db\njournal: {journal}\nnodes:\n  local:\n    transport: local\n"
    err = load_error(make_farm(tmp_path, farm=farm))
    assert err.file.endswith("farm.yaml")
    assert err.key == "journal"
    assert found in err.found
    assert not (tmp_path / "reports").exists()
    assert load_farm(make_farm(tmp_path, farm=farm.replace(journal, "journals"))).spec.journal == "journals"
