"""The README's command lines, run through the installed `farm`.

Every `farm ...` line of README.md's shell blocks (```sh, ```cron, ...) and
every row of its "Commands" table is run, as a subprocess of the `farm` script
installed beside this Python, against a toy farm (tests/toyfarm.py) in
tmp_path; each must exit 0 and print what its command prints when it works. A
README example that stops working (an option renamed, an argument dropped, a
placeholder the command no longer takes) fails here.

How a README line becomes a command here:

- `.venv/bin/farm` and `farm` are the farm installed beside this Python.
- `cd DIR &&` enters the farm folder: whatever the README calls it, it is the
  toy farm (every line runs there).
- An absolute path argument (`--log /var/log/farm/verify.log`) is taken inside
  tmp_path, so nothing is written outside it.
- A `--config FILE` that the toy farm lacks (`farms/hopper.yaml`) is written
  there, with the toy farm's node, jobs and database: the line runs as written,
  on the local node instead of the README's Hopper node.
- The Commands table's placeholders get the toy's values (PLACEHOLDERS); its
  optional `[...]` parts are all given, and each alternative of `a|b|c` is run.
- `> FILE` is a shell redirection: the command's stdout goes to FILE.
- A `farm bisect` line walks the toy farm's own git history (ToyFarms.history:
  a good commit, an unrelated one, then a regression); the toy's kernel and
  node stand for the README's, and a revision the history lacks (`v1.0`) is
  tagged there: `--good`'s at the good commit, `--bad`'s at the regression.
- Other programs in the shell blocks are not run. Each is listed in NOT_RUN
  with the reason; a program missing from that list fails the test (decide
  whether it can run here, or list it).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import farm_cli
import pytest
import yaml
from toyfarm import toy_farm

from orchestrator.cli import main
from orchestrator.config.farm import load_farm

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()

# Programs of the README's shell blocks that this test does not run, and why.
NOT_RUN = {
    "scripts/setup.sh": "installs Debian packages as root and builds .venv: the machine's setup, not a farm command",
    "scripts/test": "runs the whole test suite, this test included",
}

SHELL_BLOCKS = {"sh", "bash", "shell", "console", "cron"}


@dataclass(frozen=True)
class Example:
    source: str  # where in the README, for the test id and messages
    line: str  # as the README writes it
    argv: tuple[str, ...]  # farm COMMAND ARGS...
    stdout_to: str | None = None  # `> FILE`


def tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def shell_examples(readme: str) -> tuple[list[Example], list[str]]:
    """The farm commands of the README's shell blocks, and the other programs they run."""
    farm_lines, others = [], []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```$", readme, re.M | re.S):
        if lang not in SHELL_BLOCKS:
            continue
        for line in body.splitlines():
            line = line.removeprefix("$ ")
            words = tokens(line)
            if lang == "cron" and words:
                words = words[1:] if words[0].startswith("@") else words[5:]  # the schedule
            segments = [
                list(g) for sep, g in itertools.groupby(words, lambda w: w in {"&&", "||", ";", "|"}) if not sep
            ]
            for segment in segments:
                program = segment[0]
                if Path(program).name == "farm":
                    stdout_to = None
                    if ">" in segment:
                        at = segment.index(">")
                        stdout_to, segment = segment[at + 1], segment[:at] + segment[at + 2 :]
                    farm_lines.append(
                        Example(f"README shell block ({lang})", line.strip(), ("farm", *segment[1:]), stdout_to)
                    )
                elif program != "cd":  # cd DIR: the farm folder, which is the toy farm here
                    others.append(program)
    return farm_lines, others


def table_synopses(readme: str) -> list[str]:
    """The `farm ...` synopses of the README's "## Commands" table, as written (`\\|` unescaped)."""
    section = readme.split("\n## Commands\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\|\s*`(farm [^`]+)`\s*\|", section, re.M)
    assert rows, "README.md's Commands table has no `farm ...` rows"
    return [row.replace("\\|", "|") for row in rows]


def expand(synopsis: str) -> list[str]:
    """A synopsis as command lines: every [optional] part given, one line per
    alternative of `a|b|c`; placeholders stay (they are filled in when run)."""
    words = re.sub(r"\[(--[^\[\]]*)\]", r"\1", synopsis).split()
    return [" ".join(line) for line in itertools.product(*(w.split("|") for w in words))]


def readme_examples() -> list[Example]:
    examples, _ = shell_examples(README)
    for synopsis in table_synopses(README):
        for line in expand(synopsis):
            examples.append(Example("README Commands table", line, tuple(line.split())))
    unique: dict[tuple[str, ...], Example] = {}
    for example in examples:
        unique.setdefault(example.argv, example)
    return list(unique.values())


EXAMPLES = readme_examples()


class ToyFarms:
    """The toy farm the README's lines run in (with one run already stored), and
    a second one whose runs give `farm import` journals of runs the first lacks."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "farm"
        self.config = toy_farm(self.root)
        self.elsewhere = toy_farm(base / "elsewhere").parent
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
        self._history: dict[str, str] | None = None  # the toy's git history, made by the first bisect line
        seeded = self.farm("verify", "--all", "--no-report")
        assert seeded.returncode == 0, seeded.stdout + seeded.stderr

    def farm(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        # the README's lines as an operator types them: the installed `farm` script
        return farm_cli.farm(*args, cwd=cwd or self.root, env=self.env, console_script=True)

    def fresh_journal(self) -> Path:
        """The journal of a new run in the other farm: a run the toy farm's database lacks."""
        before = set(self.elsewhere.glob("results.db.journal/*.jsonl"))
        done = self.farm("verify", "--all", "--no-report", cwd=self.elsewhere)
        assert done.returncode == 0, done.stdout + done.stderr
        (journal,) = set(self.elsewhere.glob("results.db.journal/*.jsonl")) - before
        return journal

    def git(self, *args: str) -> subprocess.CompletedProcess:
        command = ["git", "-C", str(self.root), "-c", "user.name=farm test", "-c", "user.email=farm@test", *args]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    def history(self) -> dict[str, str]:
        """The toy farm as a git repository, made once: the good commit, an
        unrelated one, then the regression (a source that no longer compiles: the
        local node only builds). The working tree keeps the good source, so every
        other README line still passes."""
        if self._history is None:
            source = self.root / "kernels" / "toy.cpp"
            good_source = source.read_text()
            self.git("init", "-q", "-b", "main")
            self.git("add", "farm.yaml", "jobs", "kernels")
            self.git("commit", "-q", "-m", "toy passes")
            good = self.git("rev-parse", "HEAD").stdout.strip()
            (self.root / "NOTES.md").write_text("notes\n")
            self.git("add", "NOTES.md")
            self.git("commit", "-q", "-m", "notes")
            source.write_text("int main( {\n")
            self.git("commit", "-q", "-am", "toy: a regression")
            self._history = {"good": good, "bad": self.git("rev-parse", "HEAD").stdout.strip()}
            source.write_text(good_source)
        return self._history

    def bisectable(self, argv: list[str]) -> list[str]:
        """A bisect line on the toy's history: its kernel and node, and the revisions it names there."""
        history = self.history()
        argv = [*argv[:2], "toy:plain", *argv[3:]]
        argv[argv.index("--node") + 1] = "here"
        for flag in ("--good", "--bad"):
            rev = option(argv, flag)
            if self.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode != 0:
                self.git("tag", rev, history[flag[2:]])
        return argv

    def localize(self, argv: list[str]) -> list[str]:
        """Absolute paths into tmp_path; a --config the toy farm lacks written as the toy farm's."""
        argv = [
            str(self.base / "fs" / a.lstrip("/")) if a.startswith("/") and not a.startswith(str(self.base)) else a
            for a in argv
        ]
        if "--config" in argv:
            config = self.root / argv[argv.index("--config") + 1]
            if not config.exists():
                up = os.path.relpath(self.root, config.parent)
                config.parent.mkdir(parents=True, exist_ok=True)
                text = self.config.read_text().replace("sqlite:///results.db", f"sqlite:///{up}/results.db")
                text = text.replace("reports: reports", f"reports: {up}/reports")
                config.write_text(f"jobs: {up}/jobs\n{text}")
        return self.bisectable(argv) if argv[1] == "bisect" else argv


# The Commands table's placeholders, and what the toy farm gives for each
# (a callable: the journal is made when the line runs).
PLACEHOLDERS: dict[str, Callable[[ToyFarms], str]] = {
    "KERNEL[:VARIANT]": lambda toy: "toy:plain",
    "[KERNEL]...": lambda toy: "toy",
    "NAME": lambda toy: "here",
    "RESULT_ID": lambda toy: "1",
    "ID": lambda toy: "1",
    "DIR": lambda toy: str(toy.root / "out"),
    "FILE": lambda toy: str(toy.root / "export.out"),
    "JOURNAL...": lambda toy: str(toy.fresh_journal()),
    "JOURNAL": lambda toy: str(toy.fresh_journal()),
    "GOOD": lambda toy: toy.history()["good"],
    "BAD": lambda toy: toy.history()["bad"],
}
PLACEHOLDER_RE = re.compile(
    r"(?<![\w\[])(" + "|".join(re.escape(p) for p in sorted(PLACEHOLDERS, key=len)[::-1]) + r")(?!\w)"
)


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> ToyFarms:
    return ToyFarms(tmp_path_factory.mktemp("readme"))


def option(argv: list[str], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else default


def config_of(toy: ToyFarms, argv: list[str]) -> Path:
    return toy.root / option(argv, "--config", "farm.yaml")


# What each command prints when it works.
def said_verify(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    assert re.search(r"^run \d+: \d+ as expected, 0 not, 0 infra; exit 0 \(every cell as expected\)$", stdout, re.M)
    if "--log" in argv:
        assert "exit 0" in Path(option(argv, "--log")).read_text()
    if "--no-report" not in argv:
        index = load_farm(config_of(toy, argv)).reports_dir / "index.html"
        assert "toy" in index.read_text()
        assert "--quiet" in argv or f"report: {index}" in stdout.splitlines(), stdout


def said_nodes(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    assert re.search(r"^here\s+yes\s", stdout, re.M), stdout


def said_report(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    run = option(argv, "--run")
    fmt = option(argv, "--format", "html")
    if fmt != "html" and "--out" in argv:  # the export went into that file, its path on stdout
        assert stdout == f"{option(argv, '--out')}\n", stdout
        stdout = Path(option(argv, "--out")).read_text()
    if fmt == "json":
        document = json.loads(stdout)
        assert [(c["kernel"], c["variant"]) for c in document["cells"]] == [("toy", "plain")]
        assert run is None or document["run"]["id"] == int(run)
    elif fmt == "junit":
        root = ET.fromstring(stdout)
        assert [(c.get("classname"), c.get("name")) for c in root.iter("testcase")] == [("toy.plain", "here")]
        assert run is None or [s.get("id") for s in root.iter("testsuite")] == [run]
    else:
        out = Path(option(argv, "--out", str(load_farm(config_of(toy, argv)).reports_dir)))
        assert "toy" in (out / "index.html").read_text()
        assert run is None or (out / "runs" / f"{run}.html").is_file()


def said_show(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    assert stdout.startswith(f"result {argv[2]} (run ") and "toy:plain on here" in stdout, stdout
    assert re.search(r"^outcome   \S+", stdout, re.M), stdout


def said_jobs(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    (document,) = yaml.safe_load_all(stdout)
    assert document["kernel"] == "toy" and "  # jobs/toy.yaml" in stdout, stdout


def said_bisect(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    assert f"first bad commit: {toy.history()['bad']} (" in stdout, stdout
    page = Path(re.search(r"^page: (.+)$", stdout, re.M).group(1))
    assert page.is_file() and "toy:plain@here" in page.read_text(), stdout


def said_import(toy: ToyFarms, argv: list[str], stdout: str) -> None:
    assert re.fullmatch(rf"imported {re.escape(argv[2])} as run \d+ \(finished, 1 results\)\n", stdout), stdout


SAID: dict[str, Callable[[ToyFarms, list[str], str], None]] = {
    "verify": said_verify,
    "nodes": said_nodes,
    "report": said_report,
    "show": said_show,
    "import": said_import,
    "bisect": said_bisect,
    "jobs": said_jobs,
}


@pytest.mark.parametrize("example", EXAMPLES, ids=[" ".join(e.argv) for e in EXAMPLES])
def test_readme_example_runs(example: Example, toy: ToyFarms) -> None:
    leftover = re.findall(r"\b[A-Z][A-Z_]+\b", PLACEHOLDER_RE.sub("", " ".join(example.argv)))
    assert not leftover, f"{example.source}: `{example.line}` has placeholders {leftover} that PLACEHOLDERS lacks"
    line = PLACEHOLDER_RE.sub(lambda m: PLACEHOLDERS[m.group(1)](toy), " ".join(map(shlex.quote, example.argv)))
    argv = toy.localize(shlex.split(line))
    command = argv[1]
    assert command in main.commands, f"{example.source}: `{example.line}`: no command {command!r}"
    done = toy.farm(*argv[1:])
    assert done.returncode == 0, (
        f"{example.source}: `{example.line}` exited {done.returncode}\n{done.stdout}{done.stderr}"
    )
    if example.stdout_to:
        (toy.root / example.stdout_to).write_text(done.stdout)
    SAID[command](toy, argv, done.stdout)


def test_readme_examples_cover_every_command_and_every_other_program_is_listed() -> None:
    assert {e.argv[1] for e in EXAMPLES} >= set(main.commands), "a command the README never shows"
    assert set(SAID) == set(main.commands), "a command without a check of what it prints"
    shell, others = shell_examples(README)
    assert shell, "no `farm` line in README.md's shell blocks"
    unlisted = set(others) - set(NOT_RUN)
    assert not unlisted, (
        f"programs in README.md's shell blocks that this test neither runs nor lists in NOT_RUN: {unlisted}"
    )
    stale = set(NOT_RUN) - set(others)
    assert not stale, f"NOT_RUN lists programs README.md's shell blocks no longer run: {stale}"


def test_readme_parsing_finds_what_it_must() -> None:
    """The parsing itself, on a README of known content."""
    readme = (
        "```sh\nscripts/setup.sh && .venv/bin/farm verify --all    # install\n```\n"
        "```yaml\nfarm: not a shell line\n```\n"
        "```cron\n30 2 * * *  cd /srv/farm && .venv/bin/farm report --format junit > j.xml\n```\n"
    )
    lines, others = shell_examples(readme)
    assert [(e.argv, e.stdout_to) for e in lines] == [
        (("farm", "verify", "--all"), None),
        (("farm", "report", "--format", "junit"), "j.xml"),
    ]
    assert others == ["scripts/setup.sh"]
    assert expand("farm report [--run ID] [--format html|json]") == [
        "farm report --run ID --format html",
        "farm report --run ID --format json",
    ]
    assert expand("farm verify KERNEL[:VARIANT] --node NAME") == ["farm verify KERNEL[:VARIANT] --node NAME"]
    assert PLACEHOLDER_RE.findall("farm show RESULT_ID --run ID KERNEL[:VARIANT]") == [
        "RESULT_ID",
        "ID",
        "KERNEL[:VARIANT]",
    ]
