"""Red-team round 230: the night operator's run end and its outputs.

Broke (before/after):
- A reports folder the farm cannot write (a disk remounted read-only, a folder of the web server's
  user): `farm verify` ran every cell, stored the red night, and only then failed its render, so
  `reports/index.html` stayed the night before's green as the current run (its "no report" page
  could not be written there either); the cron mail had one "report not rendered" line. It is
  checked before the run now: exit 3 naming farm.yaml's `reports`, the folder and why, no run.
- `farm report --format junit|json --out FILE` stopped as it wrote (a CI step's timeout: SIGTERM; a
  cancel or Ctrl-C: SIGINT; SIGHUP): a Ctrl-C was click's "Aborted!" and exit 1, a kernel's failure,
  SIGTERM and SIGHUP killed it unsaid, and each left `FILE.PID.tmp` beside FILE. Now one `Error:` line,
  exit 128+N, the temporary removed.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from farm_cli import farm, farm_env
from toyfarm import toy_on_t4

FAILING = '#include <cstdio>\nint main() { std::printf("wrong\\n"); return 3; }\n'


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` remounted read-only (a disk error under ext4's errors=remount-ro), root's writes too."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_reports_folder_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """Before: exit 1 after the whole run, "report not rendered: ... Read-only file system" on stderr,
    and reports/index.html still "Run 1: 1 of 1 cells as expected" over run 2's failure.
    Figure: exit 3 at once, `farm.yaml: reports: found .../reports, a folder that cannot be written
    (Read-only file system)`, the `--log` ends with it, no run 2 stored, the index untouched."""
    config, env = toy_on_t4(tmp_path)
    first = farm("verify", "--all", "--config", str(config), extra_env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    index = tmp_path / "reports" / "index.html"
    assert "Run 1: 1 of 1 cells as expected" in index.read_text()
    (tmp_path / "kernels" / "toy.cpp").write_text(FAILING)  # tonight's run is red
    log = tmp_path / "verify.log"
    with read_only(tmp_path / "reports"):
        done = farm("verify", "--all", "--log", str(log), "--config", str(config), extra_env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    reports = tmp_path / "reports"
    assert done.stderr.startswith(f"Error: {config}: reports: found {reports}, a folder that cannot be written"), (
        done.stderr
    )
    assert "Read-only file system" in done.stderr and "--no-report" in done.stderr, done.stderr
    assert "farm verify failed" in log.read_text().splitlines()[-1], log.read_text()
    with sqlite3.connect(tmp_path / "results.db") as db:
        assert db.execute("SELECT id, status FROM runs").fetchall() == [(1, "finished")]
    # --no-report: the operator's way to run without the site meanwhile
    with read_only(tmp_path / "reports"):
        done = farm("verify", "--all", "--no-report", "--config", str(config), extra_env=env)
    assert done.returncode == 1, done.stdout + done.stderr


def test_a_missing_reports_folder_under_a_writable_parent_is_fine(tmp_path: Path) -> None:
    """The check makes nothing and refuses nothing the render would make: a reports folder not yet
    there, under a folder that can be written, runs and renders as before."""
    config, env = toy_on_t4(tmp_path)
    config.write_text(config.read_text().replace("reports: reports", "reports: site/new/reports"))
    done = farm("verify", "--all", "--config", str(config), extra_env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "new" / "reports" / "index.html").is_file()
    assert not [p for p in (tmp_path / "site").rglob(".farm-write-check*")]


# `farm report` in a process whose rename of the export's temporary file first sends the process
# SIGNAL: a CI step's timeout (SIGTERM) or a Ctrl-C as the file is being put in place
_STOPPED_AT_RENAME = """
import os, signal, sys
from orchestrator.report import pagewriter
real = os.replace
def replace(src, dst):
    os.kill(os.getpid(), signal.{signal})
    return real(src, dst)
pagewriter.os.replace = replace
from orchestrator.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
@pytest.mark.parametrize("fmt", ["junit", "json"])
def test_an_export_stopped_as_it_is_written_leaves_nothing_and_says_so(
    tmp_path: Path, fmt: str, name: str, code: int
) -> None:
    """Before: a Ctrl-C ended in click's "Aborted!" and exit 1, the code of a kernel's failure; a SIGTERM
    or SIGHUP killed it without a word; each left `junit.xml.PID.tmp`, the whole export under a name of
    its own, beside the file (a CI glob `junit*` takes it). Figure: exit 128+N, one `Error:` line naming
    the signal and the file, no temporary file, no export."""
    config, env = toy_on_t4(tmp_path)
    assert farm("verify", "--all", "--no-report", "--config", str(config), extra_env=env).returncode == 0
    ci = tmp_path / "ci"
    ci.mkdir()
    out = ci / f"out.{fmt}"
    done = subprocess.run(
        [sys.executable, "-c", _STOPPED_AT_RENAME.format(signal=name), "report", "--format", fmt, "--out", str(out)],
        cwd=tmp_path,
        env=farm_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith(f"Error: farm report was stopped by {name}"), done.stderr
    assert str(out) in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert sorted(p.name for p in ci.iterdir()) == [], sorted(ci.iterdir())
