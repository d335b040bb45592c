"""Red-team round 225: the farm's reading of farm.yaml's paths and of its command line.

Broke (before -> after):

1. A path the configuration names that the file system cannot follow, a symbolic link loop on its
   way or a name longer than 255 bytes (`--config`/FARM_CONFIG, `database` and --database, `jobs`,
   `kernels`, `reports`, `journal`, `lock_dir`), raised from pathlib's resolve() or exists(): every
   command was "internal error (RuntimeError: Symlink loop from ...); this is a bug in farm", exit
   70, naming no key. Now exit 3, naming the file, the key and what was expected.
2. `jobs: nope/jobs`, a jobs folder whose parent is missing too (a typo, a disk not mounted), was
   refused as "kernels: found 'kernels', outside .../nope", a key farm.yaml did not write, and
   nothing said the jobs folder was missing. Now "jobs: found 'nope/jobs', which is not a folder".
3. An option of one value given twice (`farm verify --all --config prod.yaml ... --config farm.yaml`,
   a wrapper's appended default; `--log a --log b`; `farm report --run 5 --run 6`): click kept the
   last and dropped the first unsaid, the run going to another farm or the first log getting
   nothing. Now exit 2 naming the option; `--node` (repeatable) and a flag twice stay accepted.

Held (checked by hand): `cc: {min: 8.0}` (read as "8.0"), `7.50`, `8`, `"9.0a"`, full-width digits,
blanks, `.inf`, `1e1` refused naming the key; variant names `no`, `null`, `1e3` kept as written;
`''`, `a/b`, `..`, `a:b` refused; a date where a string belongs; a UTF-8 BOM, CRLF and CR-only
endings; NUL, Latin-1 and UTF-16 files refused; `farm verify` with an unknown kernel, variant or
node (the known ones listed), `toy:`, no selection, `--config .` (a folder: exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from toyfarm import toy_farm

from orchestrator.cli import main

LONG = "x" * 300  # one name past NAME_MAX (255 bytes) on every Linux file system


def _farm_yaml(root: Path, extra: str) -> Path:
    path = root / "farm.yaml"
    text = path.read_text().replace("reports: reports\n", "" if "\nreports:" in extra else "reports: reports\n")
    path.write_text(text.replace("database: sqlite:///results.db\n", extra))
    return path


@pytest.mark.parametrize("way", ["loop", "long"])
@pytest.mark.parametrize(
    "key", ["jobs", "kernels", "reports", "journal", "lock_dir", "database", "--database", "--config"]
)
def test_a_path_the_file_system_cannot_follow_is_a_configuration_error_naming_its_key(
    tmp_path: Path, key: str, way: str
) -> None:
    """Before: `jobs: loop` (loop -> loop) or a 300-byte name was "internal error (RuntimeError:
    Symlink loop ...); this is a bug in farm", exit 70, on every command. Figure: exit 3, one Error
    line naming farm.yaml (or the option) and the key."""
    farm = toy_farm(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    bad = "loop/x" if way == "loop" else LONG
    args = ["jobs"]
    if key == "database":
        _farm_yaml(tmp_path, f"database: sqlite:///{bad}/results.db\n")
    elif key == "--database":
        args += ["--database", f"sqlite:///{tmp_path / bad}"]
    elif key == "--config":
        farm = tmp_path / bad
    else:
        _farm_yaml(tmp_path, f"database: sqlite:///results.db\n{key}: {bad}\n")
    result = CliRunner().invoke(main, [*args, "--config", str(farm)])
    assert result.exit_code == 3, result.output
    assert "bug in farm" not in result.output
    assert "symbolic link loop" in result.output or "longer than the file system holds" in result.output
    if key.startswith("--"):
        assert result.output.startswith("Error: --database:" if key == "--database" else f"Error: {farm}:")
    else:
        assert f"farm.yaml: {key}: found" in result.output, result.output
    assert os.path.exists(tmp_path / "kernels" / "toy.cpp")  # nothing was touched


def test_a_jobs_folder_that_is_not_there_is_told_as_such_not_as_kernels_outside_it(tmp_path: Path) -> None:
    """Before: `jobs: course/jobs` with no course/ was "kernels: found 'kernels', outside
    .../course; expected a folder inside .../course": the key named was one farm.yaml leaves to its
    default. Figure: exit 3, "jobs: found 'course/jobs', which is not a folder"."""
    farm = _farm_yaml(toy_farm(tmp_path).parent, "database: sqlite:///results.db\njobs: course/jobs\n")
    result = CliRunner().invoke(main, ["jobs", "--config", str(farm)])
    assert result.exit_code == 3, result.output
    assert "jobs: found 'course/jobs', which is not a folder" in result.output, result.output
    assert "kernels:" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--all", "--no-report", "--config", "{farm}", "--config", "{farm}"],
        ["verify", "--all", "--no-report", "--log", "{root}/a.log", "--log", "{root}/b.log", "--config", "{farm}"],
        ["report", "--format", "json", "--run", "1", "--run", "2", "--config", "{farm}"],
        ["jobs", "--database", "sqlite:///{root}/a.db", "--database=sqlite:///{root}/b.db", "--config", "{farm}"],
    ],
)
def test_an_option_of_one_value_given_twice_is_refused(tmp_path: Path, args: list[str]) -> None:
    """Before: the last of the two was used and the first dropped unsaid: `verify` ran (run 1 stored,
    exit 0) and wrote nothing to a.log. Figure: exit 2, the option named, no run stored."""
    farm = toy_farm(tmp_path)
    line = [a.format(farm=farm, root=tmp_path) for a in args]
    result = CliRunner().invoke(main, line)
    assert result.exit_code == 2, result.output
    given = [a.split("=")[0] for a in args if a.startswith("--")]
    option = next(a for a in given if given.count(a) > 1)
    assert f"{option} given twice" in result.output, result.output
    assert not (tmp_path / "results.db").exists()  # nothing ran, nothing stored


def test_a_repeatable_option_and_a_flag_may_still_be_given_twice(tmp_path: Path) -> None:
    """The check costs nothing it should not: `--node here --node here` and `--all --all` run as before."""
    farm = toy_farm(tmp_path)
    result = CliRunner().invoke(
        main, ["verify", "--all", "--all", "--node", "here", "--node", "here", "--no-report", "--config", str(farm)]
    )
    assert result.exit_code == 0, result.output
