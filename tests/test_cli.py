"""The `farm` command line: exit codes, messages, and the commands' help."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from farm_cli import farm, farm_argv, farm_env
from toyfarm import toy_farm

from orchestrator.cli import EXIT_MEANING, main

REPO = Path(__file__).resolve().parents[1]
FILE_ONLY = "(junit and json are one file)"


def test_verify_report_show_round_trip(tmp_path):
    config = toy_farm(tmp_path)
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compile-only" in done.stdout
    assert "toy:plain" in done.stdout
    assert "exit 0 (every cell as expected)" in done.stdout
    index = tmp_path / "reports" / "index.html"
    assert index.is_file() and "toy" in index.read_text()
    result_id = re.search(r"#(\d+)", done.stdout).group(1)
    shown = farm("show", result_id, "--config", str(config))
    assert shown.returncode == 0
    assert "outcome   compile-only" in shown.stdout
    assert "g++ -O1" in shown.stdout
    rendered = farm("report", "--config", str(config), "--out", str(tmp_path / "r2"))
    assert rendered.returncode == 0 and (tmp_path / "r2" / "index.html").is_file()


def test_selectors_and_nodes(tmp_path):
    config = toy_farm(tmp_path)
    done = farm("verify", "toy:plain", "--node", "here", "--config", str(config))
    assert done.returncode == 0, done.stderr
    bad = farm("verify", "toy:nope", "--config", str(config))
    assert bad.returncode == 3
    assert bad.stderr.startswith("Error: kernel 'toy' has no variant 'nope'")
    # `toy:` (a script's `$K:$V` with V unset) ran every variant of toy
    bad = farm("verify", "toy:", "--config", str(config))
    assert bad.returncode == 3 and bad.stderr.startswith("Error: kernel 'toy' has no variant ''"), bad.stderr
    bad = farm("verify", "--all", "--node", "mars", "--config", str(config))
    assert bad.returncode == 3 and "no node named mars" in bad.stderr


def test_a_plan_with_no_cell_is_refused_before_any_run_is_stored(tmp_path):
    """A red-team review's: with every node `enabled: false`, `farm verify --all` stored
    a run of 0 cells and exited 0, and its JUnit export was an empty, green suite: a CI
    step passed having verified nothing. Now it is refused like a selection of nothing."""
    config = toy_farm(tmp_path)
    config.write_text(config.read_text().replace("transport: local", "transport: local\n    enabled: false"))
    for selection in (["--all"], ["toy:plain"]):
        done = farm("verify", *selection, "--config", str(config))
        assert done.returncode == 3, (selection, done.stdout, done.stderr)
        assert done.stderr == (
            f"Error: {config}: nodes: found every node disabled (enabled: false: here); "
            "expected at least one enabled node, or the nodes to run named with --node.\n"
        )
        assert done.stdout == ""
    assert not list(tmp_path.glob("results.db*"))  # no run stored, no lock taken
    nothing = farm("verify", "nope", "--config", str(config))  # a selection of nothing: refused the same way
    assert nothing.returncode == 3 and nothing.stderr.startswith("Error: no job for kernel 'nope'")
    # and where the job files are read from: a job file moved away said only "no job" (review 95's note)
    assert f"the job files of {(tmp_path / 'jobs').resolve()}, the `jobs` folder of {config}" in nothing.stderr
    named = farm("verify", "--all", "--node", "here", "--no-report", "--config", str(config))
    assert named.returncode == 0 and "run 1: 1 as expected" in named.stdout, named.stderr  # a node named runs


def test_verify_needs_a_selection(tmp_path):
    done = farm("verify", "--config", str(toy_farm(tmp_path)))
    assert done.returncode == 2
    assert "--all" in done.stderr


def test_config_error_exit_code_and_message(tmp_path):
    config = toy_farm(tmp_path)
    config.write_text(config.read_text().replace("transport: local", "transprot: local"))
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 3
    assert done.stderr.startswith(f"Error: {config}: nodes.here.transprot: found an unknown key")
    assert "Did you mean 'transport'?" in done.stderr
    assert not (tmp_path / "results.db").exists()  # nothing opened, nothing half-written


def test_unexpected_outcome_exits_1(tmp_path):
    config = toy_farm(tmp_path)
    (tmp_path / "jobs" / "toy.yaml").write_text(
        (tmp_path / "jobs" / "toy.yaml").read_text().replace("{ret: 1}", "{HGMMA: 1}")
    )
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 1
    assert "inspect-fail" in done.stdout


def test_store_error_exit_code(tmp_path):
    config = toy_farm(tmp_path)
    done = farm("report", "--config", str(config))  # no database yet: report never makes one
    assert done.returncode == 5
    assert "run `farm verify` first" in done.stderr
    assert not (tmp_path / "results.db").exists()
    done = farm("show", "1", "--config", str(config), "--database", f"sqlite:///{tmp_path}/missing/dir/x.db")
    assert done.returncode == 5 and "no results database at" in done.stderr


def test_environment_overrides_farm_yaml(tmp_path, monkeypatch):
    config = toy_farm(tmp_path)
    url = f"sqlite:///{tmp_path / 'other.db'}"
    done = farm(
        "verify", "--all", "--no-report", extra_env={"FARM_CONFIG": str(config), "FARM_DATABASE": url}, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "other.db").exists() and not (tmp_path / "results.db").exists()


def test_a_run_on_another_database_leaves_farm_yamls_site_alone(tmp_path):
    """Found by a red-team helper: `farm verify --database sqlite:///scratch.db` rendered
    into farm.yaml's reports/, so a scratch run replaced the reviewers' site of
    results.db. Now such a run (--database or FARM_DATABASE) renders nothing there, says
    so in one stderr line naming the command that renders it, and keeps its exit code;
    farm.yaml's own database, however spelled, renders as before."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    index = tmp_path / "reports" / "index.html"
    before = index.read_text()
    scratch = f"sqlite:///{tmp_path / 'scratch.db'}"
    by_option = farm("verify", "--all", "--config", str(config), "--database", scratch)
    by_env = farm("verify", "--all", "--config", str(config), extra_env={"FARM_DATABASE": scratch}, timeout=300)
    for run_id, done in ((1, by_option), (2, by_env)):
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stderr == (
            f"report not rendered: the database {scratch} is not farm.yaml's (sqlite:///{tmp_path / 'results.db'}), "
            f"whose site is {tmp_path / 'reports'}; "
            f"`farm report --database {scratch} --run {run_id} --out DIR` renders this run\n"
        ), done.stderr
        assert "report: " not in done.stdout
    assert index.read_text() == before
    site = tmp_path / "scratch-site"
    rendered = farm("report", "--config", str(config), "--database", scratch, "--run", "2", "--out", str(site))
    assert rendered.returncode == 0 and (site / "runs" / "2.html").is_file(), rendered.stderr
    own = farm("verify", "--all", "--config", str(config), "--database", f"sqlite:///{tmp_path}/results.db?timeout=30")
    assert own.returncode == 0 and own.stderr == "" and "report: " in own.stdout, own.stdout + own.stderr
    assert index.read_text() != before


def test_nodes_probe_table(tmp_path):
    done = farm("nodes", "--config", str(toy_farm(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert re.search(r"^here\s+yes\s+no GPU", done.stdout, re.M)


def help_examples(command: str | None) -> list[str]:
    """The example lines of `farm COMMAND --help` (`farm --help` for None): its
    one "Example:" or "Examples:" paragraph, unwrapped, split at ";"."""
    result = CliRunner().invoke(main, [command, "--help"] if command else ["--help"])
    assert result.exit_code == 0, result.output
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", result.output)]
    found = [p for p in paragraphs if re.match(r"Examples?: ", p)]
    assert len(found) == 1, f"`farm {command or ''} --help` has {len(found)} Example paragraphs:\n{result.output}"
    return [line.strip() for line in found[0].split(":", 1)[1].split(";") if line.strip()]


@pytest.mark.parametrize("command", [None, *sorted(main.commands)], ids=["farm", *sorted(main.commands)])
def test_every_command_has_help_with_an_example(command, tmp_path, monkeypatch):
    """Each example is a `farm` command line of that command that the CLI
    accepts as written: known options, the right arguments, valid values
    (parsed by click, not run: they name kernels and nodes of the real farm)."""
    monkeypatch.chdir(tmp_path)
    examples = help_examples(command)
    assert examples
    for example in examples:
        argv = shlex.split(example)
        if ">" in argv:  # a shell redirection, not an argument
            at = argv.index(">")
            argv = argv[:at] + argv[at + 2 :]
        assert argv[0] == "farm" and len(argv) > 1, example
        assert argv[1] in main.commands and argv[1] == (command or argv[1]), example
        for word in argv[2:]:
            # a relative file the example names exists, as where it is meant (import's JOURNAL must)
            if re.fullmatch(r"[\w.-]+(/[\w.-]+)+", word):
                (tmp_path / word).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / word).touch()
        try:
            main.commands[argv[1]].make_context(f"farm {argv[1]}", argv[2:])
        except click.ClickException as err:
            pytest.fail(f"`farm {command or ''} --help` example `{example}` is refused: {err.format_message()}")


def test_readme_documents_every_command_and_exit_code():
    readme = (REPO / "README.md").read_text()
    table = readme.split("\n## Commands\n", 1)[1].split("\n#", 1)[0]
    documented = set(re.findall(r"^\|\s*`farm ([\w-]+)", table, re.M))
    assert documented == set(main.commands), "README.md's Commands table and `farm --help` list different commands"
    for code in EXIT_MEANING:
        assert re.search(rf"^\|\s*{code}\s*\|", readme, re.M), f"exit code {code}"


def test_show_and_report_read_the_database_without_cutlass_installed(tmp_path):
    """Issue 9, case 11: on a reviewer's machine without CUTLASS, the commands
    that only read the database still work; verify (which ships it) refuses."""
    import shutil

    shutil.copytree(REPO / "jobs", tmp_path / "jobs")
    shutil.copytree(REPO / "kernels", tmp_path / "kernels")
    shutil.copyfile(REPO / "results.db", tmp_path / "results.db")
    (tmp_path / "farm.yaml").write_text("nodes:\n  local:\n    transport: local\n")
    # a cutlass_library without CUTLASS's headers: dependencies.local_path finds nothing
    shadow = tmp_path / "shadow" / "cutlass_library"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path / 'shadow'}:{REPO}"}
    run = lambda *args: farm(*args, "--config", str(tmp_path / "farm.yaml"), env=env, timeout=300)  # noqa: E731
    refused = run("verify", "--all", "--no-report")
    assert refused.returncode == 3 and "not installed" in refused.stderr, refused.stderr
    shown = run("show", "10")
    assert shown.returncode == 0, shown.stderr
    assert "wgmma GEMM 256x256x256: PASS" in shown.stdout and "identity  0df830a6457c" in shown.stdout
    reported = run("report", "--format", "json")
    assert reported.returncode == 0, reported.stderr
    assert '"state": "VERIFIED"' in reported.stdout


def test_every_cli_failure_is_one_error_line_with_its_exit_code(tmp_path):
    """Issue 10, case 14: no tracebacks, no exit 1 (which says a kernel failed)."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    cases = [
        (["show", "99999999999999999999999"], 5, "no result"),
        (["show", "999999"], 5, "no result 999999"),
        (["report", "--run", "999999"], 5, "no run 999999"),
        (["report", "--out", "/proc/farm-cannot-write-here"], 3, "cannot be written"),
        # found by an adversarial review: each was an internal error (exit 70)
        (["report", "--database", "foo"], 5, "URL 'foo' cannot be read"),
        (["show", "1", "--database", "postgresql+psycopg://u:secret@h:notaport/db"], 5, "u:***@h:notaport"),
        (["report", "--run", "99999999999999999999999"], 5, "no run 99999999999999999999999"),
    ]
    taken = tmp_path / "taken"
    (taken / "index.html").mkdir(parents=True)  # a folder where the index goes
    cases.append((["report", "--out", str(taken)], 3, "cannot be written"))
    empty, other = tmp_path / "empty.db", tmp_path / "other.db"
    empty.write_bytes(b"")
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE foo (x)")
    before = other.read_bytes()
    for db_file in (empty, other):  # a command that only reads writes no schema into them
        cases.append((["show", "1", "--database", f"sqlite:///{db_file}"], 5, "holds no farm results"))
    bad_time = tmp_path / "bad.jsonl"
    bad_time.write_text('{"kind": "run", "started_at": {"$time": "yesterday"}, "trigger": "t"}\n')
    cases.append((["import", str(bad_time)], 5, "line 1 holds a value it cannot have"))
    blocker = tmp_path / "results.db.lock"
    for args, code, says in cases:
        done = farm(*args, "--config", str(config))
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("Error: ") and says in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and "secret" not in done.stderr
    assert not list(taken.rglob("*.tmp"))  # nothing half-written is left
    assert empty.read_bytes() == b"" and other.read_bytes() == before
    blocker.unlink(missing_ok=True)
    blocker.mkdir()  # a directory where the lock file goes
    done = farm("verify", "--all", "--config", str(config), "--no-report")
    assert done.returncode == 6 and "cannot take the run lock" in done.stderr and "Traceback" not in done.stderr
    blocker.rmdir()


def test_an_export_goes_whole_into_the_out_file_or_is_refused(tmp_path):
    """`--out` with junit or json was ignored: the export went to stdout, and a CI
    step that read the named file found nothing (or last night's)."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    on_stdout = farm("report", "--format", "junit", "--config", str(config))
    target = tmp_path / "ci" / "farm-junit.xml"
    done = farm("report", "--format", "junit", "--out", str(target), "--config", str(config))
    assert done.returncode == 0 and done.stdout.strip() == str(target), done.stderr
    assert target.read_text() == on_stdout.stdout and "<testsuite" in on_stdout.stdout
    assert [p.name for p in target.parent.iterdir()] == ["farm-junit.xml"]  # no temporary left
    as_json = tmp_path / "farm.json"
    assert farm("report", "--format", "json", "--out", str(as_json), "--config", str(config)).returncode == 0
    assert json.loads(as_json.read_text())["complete"] is True
    # a folder for an export, a file for the site: refused before anything is written
    for fmt, out, says in (
        ("junit", tmp_path / "ci", "is a folder; expected a regular file"),
        ("html", target, "is a file; expected a folder"),
        ("junit", f"{target}/", "ends in a slash, a folder's name; expected a regular file"),  # red-team 143
    ):
        before = target.read_bytes()
        refused = farm("report", "--format", fmt, "--out", str(out), "--config", str(config))
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert target.read_bytes() == before
    unwritable = farm("report", "--format", "json", "--out", "/proc/farm.json", "--config", str(config))
    assert unwritable.returncode == 3 and "cannot be written" in unwritable.stderr, unwritable.stderr


def test_a_reports_folder_that_cannot_take_the_site_is_refused_before_anything_runs(tmp_path):
    """A red-team review's: `reports: farm.yaml` ran and stored the run (exit 0), then
    failed the render as an internal error (exit 70); `reports: kernels` or `jobs`
    rendered the site among the course's sources. Now each is farm.yaml's error (exit 3)
    before a run is stored, for `farm report` too."""
    config = toy_farm(tmp_path)
    original = config.read_text()
    before = sorted(tmp_path.rglob("*"))
    for reports, found in (
        ("farm.yaml", f"{config}, which is a file; expected a folder"),
        ("farm.yaml/site", f"{config}/site, where {config} is a file; expected a folder"),
        ("kernels", f"{tmp_path}/kernels, the farm's `kernels` folder; expected a folder of its own"),
        (".", f"{tmp_path}, whose `kernels` pages would go into the farm's `kernels` folder {tmp_path}/kernels;"),
    ):
        config.write_text(original.replace("reports: reports", f"reports: {reports}"))
        for command in (["verify", "--all"], ["report"]):
            done = farm(*command, "--config", str(config))
            assert done.returncode == 3, (reports, command, done.stdout, done.stderr)
            assert done.stderr.startswith(f"Error: {config}: reports: found {found}"), (reports, done.stderr)
            assert done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert sorted(tmp_path.rglob("*")) == before  # no database, no page, no folder made
    config.write_text(original)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    for out in (tmp_path / "kernels", tmp_path):  # the site's --out is held to the same
        done = farm("report", "--out", str(out), "--config", str(config))
        assert done.returncode == 3 and done.stderr.startswith(f"Error: --out: {out}: found {out}"), done.stderr
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == ["toy.cpp"]
    # a site inside jobs/ or kernels/ is no source: only their own *.yaml and *.cu are read (a review's)
    config.write_text(original.replace("reports: reports", "reports: jobs/site"))
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 0 and (tmp_path / "jobs" / "site" / "index.html").is_file(), done.stderr


def test_a_report_that_fails_after_the_run_leaves_the_runs_own_exit_code(tmp_path):
    """What cannot be checked before the run (here a file where the cell pages go; a full
    disk) failed the render after the run was stored with exit 0, and the process
    returned 3 or 70 (an internal error): stored and returned codes differed."""
    config = toy_farm(tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "cells").write_text("")
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 0, (done.stdout, done.stderr)
    with sqlite3.connect(tmp_path / "results.db") as db:
        assert db.execute("SELECT status, exit_code FROM runs").fetchall() == [("finished", 0)]
    assert done.stderr.startswith("report not rendered: ") and len(done.stderr.splitlines()) == 1, done.stderr
    assert "run 1 is stored with exit 0, the code returned; `farm report --run 1` renders it" in done.stderr
    assert "internal error" not in done.stderr and "Error" not in done.stderr
    again = farm("report", "--config", str(config))  # farm.yaml's folder is named as such, not as an --out
    assert again.returncode == 3, again.stderr
    assert again.stderr.startswith(f"Error: {config}: reports: found {tmp_path}/reports, a folder that cannot be")


def test_an_export_never_replaces_what_is_no_regular_file(tmp_path):
    """A red-team review's: the export replaced `--out` by a rename whatever it was: as
    root, `--out /dev/full` turned the device into a regular file; a FIFO and a symbolic
    link were replaced too (the link's target left empty). Now refused like a folder."""
    import os
    import stat

    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    fifo, link, target = tmp_path / "export.fifo", tmp_path / "export.xml", tmp_path / "target.xml"
    os.mkfifo(fifo)
    link.symlink_to(target)
    for fmt, out, kind in (("json", fifo, "a FIFO"), ("junit", link, "a symbolic link")):
        done = farm("report", "--format", fmt, "--out", str(out), "--config", str(config))
        assert done.returncode == 2, (fmt, done.stdout, done.stderr)
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
        assert errors == [f"Error: Invalid value for '--out': {out} is {kind}; expected a regular file {FILE_ONLY}"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".fifo", ".xml", ".tmp")) == [
        "export.fifo",
        "export.xml",
    ]


def test_a_database_whose_folder_is_missing_is_refused_and_no_folder_is_made(tmp_path):
    """A typo or a disk not mounted that night: `farm verify` made the database's
    folder (the run lock's, through filelock) and stored the run there, out of the
    history's sight."""
    config = toy_farm(tmp_path)
    missing = tmp_path / "data" / "farm"
    config.write_text(re.sub(r"(?m)^database:.*$", f"database: sqlite:///{missing}/results.db", config.read_text()))
    for args in (["verify", "--all"], ["verify", "--all", "--database", f"sqlite:///{missing}/x.db"]):
        done = farm(*args, "--config", str(config))
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert f"whose folder {missing} does not exist" in done.stderr and "Traceback" not in done.stderr
        assert "--database" in args or f"{config}: database: found" in done.stderr, done.stderr
    shown = farm("show", "1", "--config", str(config))  # a command that only reads: there is none to read
    assert shown.returncode == 5 and "no results database at" in shown.stderr, shown.stderr
    assert not (tmp_path / "data").exists()
    missing.mkdir(parents=True)  # the disk is back: the run goes on as before
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    assert (missing / "results.db").is_file()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite+pysqlite:///:memory:"])
def test_an_in_memory_database_is_refused_before_anything_is_made(tmp_path, url):
    """Found by a red-team helper: `sqlite://` ran, made the node's folder, then failed
    reading ("no such table: results", exit 5), and no result could have been kept."""
    config = toy_farm(tmp_path)
    config.write_text(re.sub(r"(?m)^database:.*$", f"database: '{url}'", config.read_text()))
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert f"{config}: database: found {url}" in done.stderr and "keeps nothing" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "node").exists()


def test_one_database_file_takes_one_run_lock_however_its_url_is_spelled(tmp_path):
    """Found by a red-team helper: the lock (and the journal folder) were named by the
    URL's text, so results.db through a symbolic link, with `?timeout=30`, or spelled
    `sqlite+pysqlite:///` took a lock of its own: two runs wrote one database at once,
    and the second marked the live one aborted. Each spelling is refused (exit 6)
    while the plain URL's lock is held, naming the one lock beside the file itself."""
    from orchestrator.store.journal import journal_folder
    from orchestrator.store.lock import RunLock, lock_path

    config = toy_farm(tmp_path / "farm")
    root = config.parent
    real = tmp_path / "data" / "results.db"
    real.parent.mkdir()
    (root / "results.db").symlink_to(real)  # results.db on a bigger disk
    spellings = [
        f"sqlite:///{root / 'results.db'}",
        f"sqlite:///{real}?timeout=30",
        f"sqlite+pysqlite:///{real}",
        "sqlite+pysqlite:///results.db",  # relative to farm.yaml, through the link
    ]
    lock = lock_path(f"sqlite:///{real}", root)
    assert lock == tmp_path / "data" / "results.db.lock"
    with RunLock(lock):
        for url in spellings:
            done = farm("verify", "--all", "--no-report", "--wait", "0", "--config", str(config), "--database", url)
            assert done.returncode == 6, (url, done.stdout, done.stderr)
            assert f"another farm run holds {lock} (pid " in done.stderr, (url, done.stderr)
    assert not real.exists(), "a refused run opens no database"
    for url in [f"sqlite:///{real}", *spellings[:3]]:
        assert journal_folder(url, root) == tmp_path / "data" / "results.db.journal", url


def test_a_reader_that_stops_reading_is_no_internal_error(tmp_path):
    """`farm show 1 | head -1`: an internal error (exit 70) in 2 of 3 tries before (an
    adversarial review's); now the shell's SIGPIPE code, no Error line."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    command = shlex.join(farm_argv("show", "1", "--config", str(config)))
    for _ in range(3):
        done = subprocess.run(
            ["bash", "-c", f"{command} | head -c 10 > /dev/null; echo ${{PIPESTATUS[0]}}"],
            env=farm_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stdout.strip() in ("0", "141") and "Error" not in done.stderr, (done.stdout, done.stderr)


def test_a_run_killed_mid_way_leaves_an_index_that_says_so(tmp_path, monkeypatch):
    """Found by a red-team helper: a nightly run SIGKILLed mid-way (the OOM killer, a
    reboot) left the night before's green index.html with no word of it. The site is
    now rendered as soon as the run is stored, so it says run 2 did not finish."""
    import signal
    import time

    from nodes import CARDS, nvidia_smi_script, smi_on_path

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)
    done = farm("verify", "--all", "--config", str(config))
    index = tmp_path / "reports" / "index.html"
    assert done.returncode == 0 and "Run 1: 1 of 1 cells as expected" in index.read_text(), done.stdout
    job = tmp_path / "jobs" / "toy.yaml"  # night 2's run outlives the farm: it is killed during it
    slow = job.read_text().replace("inspect: 'objdump", "inspect: 'sleep 60; objdump")
    job.write_text(slow.replace("instructions: {ret: 1}", "instructions: {}"))  # a dump that counts nothing
    argv = farm_argv("verify", "--all", "--quiet", "--config", str(config))
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=farm_env()
    ) as night:
        deadline = time.monotonic() + 120
        # "Run 2: no report" comes first, as soon as the run is stored; the start's render follows
        while "Run 2 did not finish" not in index.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(night.pid, signal.SIGKILL)
        night.wait(timeout=30)
    text = index.read_text()
    assert "Run 2 did not finish (running)" in text and "this run is not green whatever its counts say" in text
    assert "Run 1: 1 of 1 cells as expected" not in text


def test_a_run_that_fails_while_its_start_render_is_slow_leaves_an_index_that_says_so(tmp_path, monkeypatch):
    """Found in review: a run that failed at once (the database full at its first result)
    while the render of its start was still going exited under that thread, and the
    index kept the night before's green. The thread is joined and the site rendered
    again, the run stored aborted."""
    import time

    from nodes import CARDS, nvidia_smi_script, smi_on_path

    from orchestrator.errors import StoreError
    from orchestrator.report import site
    from orchestrator.store.database import Store

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)
    assert CliRunner().invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    rendered = site.render

    def slow(*args, **kwargs):
        time.sleep(2)  # a big site's render
        return rendered(*args, **kwargs)

    def full(self, *args, **kwargs):
        raise StoreError("cannot write the results database: database or disk is full")

    monkeypatch.setattr(site, "render", slow)
    monkeypatch.setattr(Store, "add_result", full)
    done = CliRunner().invoke(main, ["verify", "--all", "--quiet", "--config", str(config)])
    assert done.exit_code == 5, done.output
    text = (tmp_path / "reports" / "index.html").read_text()
    assert "Run 2 did not finish (aborted" in text and "Run 1: 1 of 1 cells as expected" not in text


def test_a_database_on_a_read_only_mount_says_so(tmp_path):
    """Found by a red-team helper: results.db on a read-only mount (a backup share, a disk
    remounted read-only) gave `farm report` and `farm show` SQLite's bare "unable to open
    database file" for a file that is there: SQLite's WAL mode writes results.db-shm
    beside it even to read. The error says so, and what to do."""
    config = toy_farm(tmp_path)
    (tmp_path / "db").mkdir()
    config.write_text(config.read_text().replace("sqlite:///results.db", "sqlite:///db/results.db"))
    assert farm("verify", "--all", "--no-report", "--config", str(config)).returncode == 0
    for shm in (tmp_path / "db").glob("results.db-*"):
        shm.unlink()
    mounted = subprocess.run(["mount", "--bind", str(tmp_path / "db"), str(tmp_path / "db")], check=False)
    assert mounted.returncode == 0
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(tmp_path / "db")], check=True)
        done = farm("report", "--format", "json", "--config", str(config))
    finally:
        subprocess.run(["umount", str(tmp_path / "db")], check=False)
    assert done.returncode == 5, done.stderr
    assert "is read-only, and SQLite must write results.db-shm there even to read" in done.stderr, done.stderr
    assert "give that copy with --database" in done.stderr


def test_output_that_cannot_be_written_never_costs_the_run(tmp_path):
    """A red-team review's: `farm verify ... | head -1` printed a traceback (a BrokenPipeError
    in a node's thread), aborted the run with no result, stored exit 70 and returned 141;
    stdout on a full disk (or a --log there) did the same as an internal error. Now the
    printing stops and the run finishes, stored with the code the process returns: here
    a reader that leaves after one line, /dev/full as stdout and as --log, and a
    terminal that goes away under the live display."""
    import os
    import select

    config = toy_farm(tmp_path)
    job = tmp_path / "jobs" / "toy.yaml"
    # every run's cell line comes a second after the reader left (a build is reused, its inspect is not)
    slow = job.read_text().replace("inspect: 'objdump", "inspect: 'sleep 1; objdump")
    job.write_text(slow.replace("instructions: {ret: 1}", "instructions: {}"))  # a dump that counts nothing
    args = ("verify", "--all", "--no-report", "--config", str(config))
    argv = farm_argv(*args)
    ended: dict[str, tuple[int, str]] = {}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=farm_env()) as piped:
        assert b"run 1: 1 cells on 1 nodes" in piped.stdout.readline()
        piped.stdout.close()  # the reader stops reading, as `| head -1` does
        ended["pipe"] = piped.wait(timeout=300), piped.stderr.read().decode()
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            argv, stdout=full, stderr=subprocess.PIPE, text=True, env=farm_env(), timeout=300, check=False
        )
        ended["full"] = done.returncode, done.stderr
    done = farm(*args, "--log", "/dev/full", timeout=300)
    ended["log"] = done.returncode, done.stderr
    assert "run 3: 1 as expected, 0 not, 0 infra; exit 0" in done.stdout  # stdout itself goes on
    terminal, slave = os.openpty()  # the live display's path: stdout a terminal
    with subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, env=farm_env()) as live:
        os.close(slave)
        seen = b""
        while b"\n" not in seen and select.select([terminal], [], [], 60)[0]:
            seen += os.read(terminal, 1024)
        assert b"run 4: 1 cells on 1 nodes" in seen, seen
        os.close(terminal)  # the terminal goes away: writing to it is EIO
        ended["terminal"] = live.wait(timeout=300), live.stderr.read().decode()
    with sqlite3.connect(tmp_path / "results.db") as db:
        stored = db.execute(
            "SELECT status, exit_code, (SELECT count(*) FROM results WHERE run_id = runs.id) FROM runs ORDER BY id"
        ).fetchall()
    assert stored == [("finished", 0, 1)] * 4, (stored, ended)
    full = "farm: cannot write {} ({}): nothing more goes there; the run goes on\n"
    assert ended == {
        "pipe": (0, ""),  # a reader that stopped reading is no news
        "full": (0, full.format("<stdout>", "No space left on device")),
        "log": (0, full.format("/dev/full", "No space left on device")),
        "terminal": (0, full.format("<stdout>", "Input/output error")),
    }


def test_log_folder_is_made_and_control_characters_never_reach_the_terminal(tmp_path):
    config = toy_farm(tmp_path)
    log = tmp_path / "var" / "log" / "farm" / "verify.log"  # like the README's cron line, folder missing
    done = farm("verify", "--all", "--config", str(config), "--no-report", "--log", str(log))
    assert done.returncode == 0, done.stderr
    assert "run 1: 1 as expected" in log.read_text()
    done = farm("verify", "--all", "--config", str(config), "--trigger", "cron\x1b[2J")
    assert done.returncode == 2 and "\x1b" not in done.stderr and "control characters" in done.stderr


def test_exports_of_an_unfinished_run_never_look_green(tmp_path):
    """Issue 10, case 5: a run that did not finish is incomplete in JSON,
    an error in JUnit, and flagged on its page."""
    import json
    import sqlite3

    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE runs SET status = 'aborted', exit_code = 4")
    exported = farm("report", "--format", "json", "--config", str(config))
    document = json.loads(exported.stdout)
    assert document["complete"] is False and document["summary"]["not_run"] == 0
    junit = farm("report", "--format", "junit", "--config", str(config))
    assert 'type="incomplete-run"' in junit.stdout and 'errors="1"' in junit.stdout
    # the export's exit code is the run's: a CI step that only exports is not green either
    assert exported.returncode == junit.returncode == 4
    assert farm("report", "--config", str(config)).returncode == 0
    assert 'id="incomplete"' in (tmp_path / "reports" / "index.html").read_text()
    # its own page says so at the top too, and the history greys its count
    assert 'id="incomplete"' in (tmp_path / "reports" / "runs" / "1.html").read_text()
    history = (tmp_path / "reports" / "history.html").read_text()
    assert 'class="flag">aborted (did not finish)' in history and 'class="good"' not in history
    # a run still marked running (its farm killed, not yet found at the next start): the
    # cells it planned with no result are not-run in both exports, and it exits 4, not 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE runs SET status = 'running', exit_code = NULL")
        db.execute("DELETE FROM results")
    exported = farm("report", "--format", "json", "--config", str(config))
    document = json.loads(exported.stdout)
    assert document["summary"]["not_run"] == 1 and document["unfinished"] == [
        {"kernel": "toy", "variant": "plain", "node": "here", "device": None}
    ]
    junit = farm("report", "--format", "junit", "--config", str(config))
    assert 'type="not-run"' in junit.stdout and 'tests="2"' in junit.stdout and 'errors="2"' in junit.stdout
    assert exported.returncode == junit.returncode == 4
    # and the matrix's summary counts it: "0 of 0 cells as expected" said nothing of it (a red-team finding)
    assert farm("report", "--config", str(config)).returncode == 0
    summary = (tmp_path / "reports" / "index.html").read_text()
    assert "0 of 1 cells as expected" in summary and "1 without a result (the run did not finish)" in summary


def test_a_finished_run_missing_a_planned_cells_result_is_incomplete_everywhere(tmp_path):
    """A run stored finished (exit 0) that holds no result for a cell it planned (a
    farm that lost it, or a row gone from the database) reads as whole nowhere: JSON
    complete false with the cell listed, a JUnit error for it and complete false, an
    export exit code that is not 0, and the index says so at the top."""
    import json
    import sqlite3

    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        assert db.execute("SELECT status, exit_code FROM runs").fetchall() == [("finished", 0)]
        db.execute("DELETE FROM results")
    exported = farm("report", "--format", "json", "--config", str(config))
    document = json.loads(exported.stdout)
    assert document["complete"] is False and document["run"]["status"] == "finished"
    assert document["unfinished"] == [{"kernel": "toy", "variant": "plain", "node": "here", "device": None}]
    assert document["summary"]["not_run"] == 1
    junit = farm("report", "--format", "junit", "--config", str(config))
    assert '<property name="complete" value="false"' in junit.stdout
    assert "no result was stored for this planned cell" in junit.stdout and 'errors="1"' in junit.stdout
    assert exported.returncode == junit.returncode == 4
    assert farm("report", "--config", str(config)).returncode == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    assert 'id="incomplete"' in index and "of the cells it planned has no result" in index
    assert "1 without a result (planned, none stored: a bug in the farm)" in index


def test_text_from_the_database_never_chooses_a_path_or_reaches_the_terminal_raw(tmp_path):
    """Issue 10, case 13: a database is input too. A node named "../../x" in it
    writes no page outside --out, and ESC/BEL bytes a kernel printed are
    escaped by `farm show`."""
    import sqlite3

    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE results SET node = '../../x', stdout = ?", (b"\x1b]0;owned\x07\x1b[2Jtoy: PASS\n",))
        db.execute("UPDATE node_snapshots SET node = '../../x'")
    out = tmp_path / "deep" / "out"
    done = farm("report", "--config", str(config), "--out", str(out))
    assert done.returncode == 0, done.stderr
    written = {p.resolve() for p in tmp_path.rglob("*.html")}
    assert written and all(p.is_relative_to(out.resolve()) for p in written), sorted(map(str, written))
    shown = farm("show", "1", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\\x1b]0;owned\\x07" in shown.stdout


def test_the_quiet_line_of_a_cell_stopped_before_any_stage_names_no_stage(tmp_path):
    """Found by a red-team helper: a run stopped during the probe put
    `node here: not-run at None: the run was stopped (SIGTERM) ...` in the cron mail.
    `at STAGE` is said only when a stage failed."""
    import io

    from orchestrator.config.farm import load_farm
    from orchestrator.plan import plan_cells
    from orchestrator.progress import PlainListener
    from orchestrator.run.scheduler import FarmRun
    from orchestrator.store.database import Store

    class StopAtStart(PlainListener):
        run: FarmRun

        def run_started(self, run_id: int, cells: list) -> None:
            self.run.stop("SIGTERM")

    farm = load_farm(toy_farm(tmp_path))
    printed = io.StringIO()
    listener = StopAtStart(printed, quiet=True)
    store = Store(farm.database_url)
    try:
        listener.run = FarmRun(farm, store, listener=listener, cache_dir=tmp_path / "archives")
        assert listener.run.execute(plan_cells(farm)).outcomes == {"not-run": 1}
    finally:
        store.close()
    lines = [line.split("] ", 1)[1] for line in printed.getvalue().splitlines()]
    assert lines == [
        "node here: not-run: 1 cell (toy:plain@here): the run was stopped (SIGTERM) before this cell finished"
    ], lines


def test_a_run_whose_end_cannot_be_stored_is_no_success(tmp_path, monkeypatch):
    """Found by a red-team helper: results.db's disk filled just as the run was marked
    finished. The farm swallowed the error and exited 0 with nothing on stderr, the run
    stored as still running (its exports said incomplete). It exits 5 now, saying why."""
    from nodes import CARDS, nvidia_smi_script, smi_on_path

    from orchestrator.errors import StoreError
    from orchestrator.store.database import Store

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)

    def full(self, run_id, status, exit_code):
        raise StoreError("the results database failed writing: OperationalError: database or disk is full")

    monkeypatch.setattr(Store, "finish_run", full)
    done = CliRunner().invoke(main, ["verify", "--all", "--no-report", "--config", str(config)])
    assert done.exit_code == 5, done.output
    assert "database or disk is full" in done.output, done.output


def test_the_end_of_run_matrix_shows_a_nodes_card_names_as_text() -> None:
    """Found by a red-team helper: a node whose card is named with escape sequences had
    them reach the operator's terminal raw in the matrix printed at a run's end (a
    forged green verdict line over the real one, the rest hidden)."""
    from orchestrator.classify import Verdict
    from orchestrator.cli import _matrix_text
    from orchestrator.outcomes import Outcome
    from orchestrator.plan import Cell, Expectation
    from orchestrator.run.cell import CellResult
    from orchestrator.run.summary import RunSummary

    summary = RunSummary(run_id=1)
    for device in ("Tesla T4", "\x1b[2K\x1b[1Grun 1: 2 as expected; exit 0\x1b[8m"):
        cell = Cell("k", "v", "n", device, True)
        result = CellResult(cell, Expectation(Outcome.PASS, "r"), Verdict(Outcome.FAIL, "run", "x"))
        summary.results.append((cell, result, 1))
    text = _matrix_text(summary)
    assert "\x1b" not in text and "\\x1b[2K" in text, text
    assert text.count("fail") == 2


def test_a_pass_of_a_run_that_did_not_finish_is_nowhere_green(tmp_path, monkeypatch):
    """Found by a red-team helper: a night killed after a cell passed on a confirmed card
    (its run marked aborted by the next verify). The matrix kept that pass solid green,
    its cell page too, and `farm show` said "outcome pass", while the kernel page rightly
    called the card unverified. Each now says the run did not finish and that nothing of
    it certifies, as for a stand-in card."""
    from nodes import CARDS, nvidia_smi_script, smi_on_path

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--no-report", "--config", str(config)).returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:  # as a confirmed card's, then killed mid-run
        db.execute("UPDATE results SET real_gpu = 1")
        db.execute("UPDATE runs SET status = 'running', exit_code = NULL")
    # before the next verify marks it aborted: its pages, written once, say how it stood then
    assert farm("report", "--out", str(tmp_path / "then"), "--config", str(config)).returncode == 0
    (then,) = (tmp_path / "then" / "cells").glob("*.html")
    assert "run 1 had not finished when this page was written: certifies nothing" in then.read_text()
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE runs SET status = 'aborted'")
    assert farm("report", "--config", str(config)).returncode == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    assert "run 1 did not finish: certifies nothing" in index, index
    assert re.findall(r'<td class="([^"]*)" data-node=', index) == ["good unconfirmed"], index
    (page,) = (tmp_path / "reports" / "cells").glob("*.html")
    assert "run 1 did not finish: certifies nothing" in page.read_text()
    assert 'class="good unconfirmed"' in (tmp_path / "reports" / "runs" / "1.html").read_text()
    grey = '<td class="h good unconfirmed">pass<small>certifies nothing</small></td>'
    assert grey in (tmp_path / "reports" / "kernels" / "toy.html").read_text()
    shown = farm("show", page.stem, "--config", str(config))
    assert "run       1 did not finish (aborted): nothing of it certifies" in shown.stdout, shown.stdout
    exported = json.loads(farm("report", "--format", "json", "--config", str(config)).stdout)
    assert [cell["certifies_nothing"] for cell in exported["cells"]] == [True]
    junit = farm("report", "--format", "junit", "--config", str(config)).stdout
    assert 'skipped="1"' in junit and "in run 1, which did not finish (aborted): it certifies nothing" in junit


def test_the_reviewers_site_never_goes_back_to_an_older_run(tmp_path, monkeypatch):
    """Found by a red-team helper: `farm report --run 1` after a red run 2 rewrote the
    reviewers' site as of run 1: a green index, run 2 gone from the history. An older
    run renders elsewhere (--out); the site stays the latest run's."""
    from nodes import CARDS, nvidia_smi_script, smi_on_path

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)
    for _ in range(2):
        assert farm("verify", "--all", "--config", str(config)).returncode == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    done = farm("report", "--run", "1", "--config", str(config))
    assert done.returncode == 2 and "run 1 is not the latest run (2)" in done.stderr, done.stderr
    assert (tmp_path / "reports" / "index.html").read_text() == index
    done = farm("report", "--run", "1", "--out", str(tmp_path / "reports"), "--config", str(config))
    assert done.returncode == 2 and "run 1 is not the latest run (2)" in done.stderr, done.stderr  # the site, named
    done = farm("report", "--run", "1", "--out", str(tmp_path / "old"), "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "Run 1" in (tmp_path / "old" / "index.html").read_text()
    assert farm("report", "--run", "2", "--config", str(config)).returncode == 0


def test_no_index_of_the_night_before_stays_over_a_run_it_does_not_show(tmp_path, monkeypatch):
    """Found by a red-team helper: a red night whose render failed (a full disk under
    reports/) left the night before's green index, marked by nothing; and a farm killed
    in the second or so before its start's render wrote the index left it too. The index
    says run N has no report at once when the run is stored, and again when its render
    fails (or is removed, where even that cannot be written)."""
    from nodes import CARDS, nvidia_smi_script, smi_on_path

    from orchestrator.report import site

    smi_on_path(tmp_path / "smi", nvidia_smi_script(CARDS["t4"]), monkeypatch)
    config = toy_farm(tmp_path)
    index = tmp_path / "reports" / "index.html"
    assert CliRunner().invoke(main, ["verify", "--all", "--config", str(config)]).exit_code == 0
    assert "Run 1: 1 of 1 cells as expected" in index.read_text()
    rendered, seen = site.render, []

    def full(*args, **kwargs):
        seen.append(index.read_text())  # what a reader finds while the render runs, or if the farm dies now
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(site, "render", full)
    from orchestrator.run.scheduler import FarmRun

    begin = FarmRun._begin

    def storing(self, *args, **kwargs):
        seen.append(index.read_text())  # the farm killed as the run is being stored
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(FarmRun, "_begin", storing)
    done = CliRunner().invoke(main, ["verify", "--all", "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert len(seen) == 3 and "A new run: no report" in seen[0], seen
    assert all("Run 2: no report" in text for text in seen[1:]), seen
    text = index.read_text()
    assert "Run 1: 1 of 1 cells as expected" not in text
    assert "Run 2: no report" in text and "No space left on device" in text, text
    monkeypatch.setattr(site, "render", rendered)
    assert farm("report", "--config", str(config)).returncode == 0
    assert "Run 2: 1 of 1 cells as expected" in index.read_text()


def test_junit_counts_a_compile_only_cell_skipped_not_passed(tmp_path, monkeypatch):
    """Found by a red-team helper: a compile-only cell (a node without a GPU: the kernel
    never ran) was a plain passed testcase, which a CI's JUnit view shows green."""
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # no nvidia-smi: a node without a GPU
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--no-report", "--config", str(config)).returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        assert [o for (o,) in db.execute("select outcome from results")] == ["compile-only"]
    junit = farm("report", "--format", "junit", "--config", str(config)).stdout
    assert 'tests="1"' in junit and 'skipped="1"' in junit, junit
    assert "compile-only: built and inspected on a node without a GPU; the kernel never ran" in junit


def test_an_export_or_a_log_is_never_written_over_the_farms_own_files(tmp_path):
    """Found by a red-team helper: `farm report --format json --out results.db` replaced
    the database with JSON (exit 0), and `farm verify --log kernels/toy.cpp` appended
    progress lines to a byte-exact kernel. Each is refused, naming the file, and
    nothing is written."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    kept = {p: p.read_bytes() for p in (tmp_path / "results.db", config, tmp_path / "kernels" / "toy.cpp")}
    kept[tmp_path / "jobs" / "toy.yaml"] = (tmp_path / "jobs" / "toy.yaml").read_bytes()
    for fmt, out, said in (
        ("json", "results.db", "the results database"),
        ("junit", "farm.yaml", "the farm's configuration"),
        ("json", "kernels/toy.cpp", "kernel toy's kernels/toy.cpp"),
        ("json", "results.db-wal", "the results database's wal file"),
        ("junit", "reports/run.xml", "the reviewers' site"),
    ):
        done = farm("report", "--format", fmt, "--out", out, "--config", str(config), cwd=tmp_path)
        assert done.returncode == 3 and said in done.stderr and "--out" in done.stderr, (out, done.stderr)
    for log in ("kernels/toy.cpp", "jobs/toy.yaml", "results.db"):
        done = farm("verify", "--all", "--log", log, "--config", str(config), cwd=tmp_path)
        assert done.returncode == 3 and "--log" in done.stderr and "a file of its own" in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in kept} == kept
    assert not (tmp_path / "results.db-wal").exists() and not (tmp_path / "reports" / "run.xml").exists()
    done = farm("report", "--format", "json", "--out", "run.json", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0 and json.loads((tmp_path / "run.json").read_text())["run"]["id"] == 1


def test_an_outcome_word_this_farm_does_not_know_is_shown_and_never_green(tmp_path):
    """Found by a red-team helper: a results.db holding an outcome word this farm does not
    know (a newer farm's, a hand's edit) made `farm report` "a bug in farm" (exit 70). It is
    rendered as written, counted not as expected."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE results SET outcome = 'perf-ok'")
    done = farm("report", "--config", str(config))
    text = (tmp_path / "reports" / "index.html").read_text()
    assert done.returncode == 0 and "perf-ok" in text, done.stderr
    assert "Run 1: 1 of 1 cells as expected" not in text and "Run 1: 0 of 1 cells as expected" in text
    shown = farm("show", "1", "--config", str(config))
    assert shown.returncode == 0 and "outcome   perf-ok" in shown.stdout, shown.stderr


def test_a_database_url_whose_port_is_no_number_is_the_users_to_fix(tmp_path):
    """Found by a red-team helper: `verify` took its run lock before the store read the URL,
    and a port that is no number there was "a bug in farm" (exit 70)."""
    config = toy_farm(tmp_path)
    url = "postgresql+psycopg://farm:secret@db.example.org:54321x/farm"
    done = farm("verify", "--all", "--database", url, "--config", str(config))
    assert done.returncode == 5, done.stderr
    assert "cannot be read" in done.stderr and "54321x" in done.stderr and "secret" not in done.stderr


def test_a_reports_folder_under_home_is_the_users_home(tmp_path):
    """Found by a red-team helper: `reports: ~/site` made a literal ./~/site beside farm.yaml,
    the reviewers' site written elsewhere unsaid, where `journal` and a local node's
    `workdir` read `~` as the home folder."""
    config = toy_farm(tmp_path / "farm")
    config.write_text(config.read_text().replace("reports: reports", "reports: ~/site"))
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    done = farm("verify", "--all", "--config", str(config), env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / "site" / "index.html").exists() and not (tmp_path / "farm" / "~").exists()


def test_a_run_refused_at_its_start_leaves_the_last_runs_site(tmp_path):
    """Found by a red-team helper: a verify refused at its start (its journal cannot be
    written: results.db.journal is a file) exited 5, and the index it had already turned
    into "a new run is starting" stayed so: the last stored run's matrix gone, nothing new
    stored. The site is the last stored run's again."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    shutil.rmtree(tmp_path / "results.db.journal")
    (tmp_path / "results.db.journal").write_text("not a folder\n")
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 5 and "results.db.journal is a file, where the journal's folder goes" in done.stderr
    text = (tmp_path / "reports" / "index.html").read_text()
    assert "Run 1: 1 of 1 cells as expected" in text and "is starting" not in text


def test_farm_show_prints_a_bidi_override_as_an_escape(tmp_path):
    """Found by a red-team helper: a reason holding U+202E (a kernel's words, a known
    failure's reason) reached the terminal raw from `farm show`, and read backwards there."""
    config = toy_farm(tmp_path)
    assert farm("verify", "--all", "--config", str(config)).returncode == 0
    with sqlite3.connect(tmp_path / "results.db") as db:
        db.execute("UPDATE results SET reason = 'fine \u202eSSAP'")
    shown = farm("show", "1", "--config", str(config))
    assert shown.returncode == 0 and "fine \\u202eSSAP" in shown.stdout and "\u202e" not in shown.stdout


@pytest.mark.parametrize("query", ["?mode=ro", "?mode=rwc&uri=true", "?immutable=1"])
def test_a_sqlite_url_whose_query_changes_the_file_or_its_mode_is_refused(tmp_path, query):
    """`sqlite:///file:r.db?mode=rwc&uri=true` stored the run in a file named `file:r.db?mode=rwc`
    while the run lock and journal were kept beside `file:r.db`; `?mode=ro` was ignored and the
    run wrote the database. Refused before anything is made; `?timeout=` still loads."""
    config = toy_farm(tmp_path)
    written = config.read_text()
    config.write_text(re.sub(r"(?m)^database:.*$", f"database: 'sqlite:///file:r.db{query}'", written))
    done = farm("verify", "--all", "--config", str(config))
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert f"{config}: database: found" in done.stderr and "whose query sets" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("file:")]
    config.write_text(re.sub(r"(?m)^database:.*$", "database: 'sqlite:///r.db?timeout=20'", written))
    assert farm("verify", "--all", "--config", str(config), "--no-report").returncode == 0
    assert (tmp_path / "r.db").is_file()
