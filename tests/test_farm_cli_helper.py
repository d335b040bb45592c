"""Tests run the farm's command line in a subprocess through tests/farm_cli.py only.

Fourteen private copies of a `farm(*args)` helper drifted apart (one put this checkout on
PYTHONPATH, the others ran whatever farm the virtual environment had installed), and the drift
hid a failing change. These tests fail the day a test file grows its own copy again."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from farm_cli import CHECKOUT, farm, farm_argv, farm_env

TESTS = Path(__file__).resolve().parent
HELPER = TESTS / "farm_cli.py"  # the one place that runs the farm itself

# the subprocess calls that run a command to its end: what each private copy did (Popen, for
# a farm a test signals or reads on a terminal while it runs, is no copy of `farm()`)
RUNS_TO_THE_END = {"run", "call", "check_call", "check_output"}
# what names the farm's command line in a helper's argv
NAMES_THE_FARM = ("orchestrator.cli", "farm_argv")


def _names_the_farm(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and inner.value in NAMES_THE_FARM:
            return True
        if isinstance(inner, ast.Name) and inner.id in NAMES_THE_FARM:
            return True
    return False


def _runs_a_subprocess(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and isinstance(inner.func.value, ast.Name)
            and inner.func.value.id == "subprocess"
            and inner.func.attr in RUNS_TO_THE_END
        ):
            return True
    return False


def private_farm_helpers(source: str) -> list[str]:
    """The helpers in one test file's source that run `farm` themselves: a top-level
    `def farm(`, or any function other than a test (a helper, a fixture, a method) that
    names the farm's command line and runs a subprocess to its end. A test's own inline
    `subprocess.run` of the farm (a signal, an environment it builds) is not a helper."""
    found = [f"line {n}: def farm(" for n, line in enumerate(source.splitlines(), 1) if re.match(r"def farm\(", line)]
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("test_"):
            continue
        if _names_the_farm(node) and _runs_a_subprocess(node):
            found.append(f"line {node.lineno}: def {node.name}(")
    return found


def test_no_test_file_has_its_own_farm_subprocess_helper() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50, files  # the scan reads the suite, not an empty folder
    found = {
        str(path.relative_to(TESTS)): helpers
        for path in files
        # this file is skipped too: its sample copies below are strings the line scan would read
        if path not in (HELPER, Path(__file__).resolve()) and (helpers := private_farm_helpers(path.read_text()))
    }
    assert not found, f"run the farm through tests/farm_cli.py's farm(), not a copy of it: {found}"


def test_the_scan_finds_the_copies_it_was_written_against() -> None:
    """The scan can fail: each shape a private copy had is found, each legitimate use is not."""
    copies = {
        "a top-level farm": """
def farm(*args):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True)
""",
        "another name, the argv beforehand": """
def _farm(*args, umask=0o022):
    argv = [sys.executable, "-m", "orchestrator.cli", *args]
    return subprocess.run(argv, preexec_fn=lambda: os.umask(umask))
""",
        "a method, the shared argv": """
class Toy:
    def cli(self, *args):
        return subprocess.check_output(farm_argv(*args))
""",
        "a wrapper named farm, even over the helper": """
def farm(*args):
    return farm_cli.farm(*args, timeout=60)
""",
    }
    for shape, source in copies.items():
        assert private_farm_helpers(source), shape
    allowed = {
        "a wrapper over the helper": """
def farm_cli(root, *args):
    return farm(*args, cwd=root, env=cli_env(root))
""",
        "a test's own run": """
def test_x(tmp_path):
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "verify"], check=False)
""",
        "a farm it signals while it runs": """
def farm_popen(root, *args):
    return subprocess.Popen(farm_argv(*args), start_new_session=True)
""",
        "a method named farm over the helper": """
class Toy:
    def farm(self, *args):
        return farm_cli.farm(*args, cwd=self.root)
""",
    }
    for shape, source in allowed.items():
        assert not private_farm_helpers(source), shape


def test_the_helper_runs_this_checkouts_farm_from_any_folder(tmp_path: Path) -> None:
    """From a folder outside the checkout, with `PYTHONPATH=.` (CI's way), the farm imported is
    still this checkout's: what the drifted copies got wrong."""
    probe = "import orchestrator, pathlib; print(pathlib.Path(orchestrator.__file__).resolve().parent.parent)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=farm_env(extra_env={"PYTHONPATH": "."}),
        timeout=60,
        check=True,
    )
    assert Path(done.stdout.strip()) == CHECKOUT, done.stdout
    assert farm_env(extra_env={"PYTHONPATH": "."})["PYTHONPATH"].split(":")[0] == str(CHECKOUT)
    assert farm_argv("jobs") == [sys.executable, "-m", "orchestrator.cli", "jobs"]
    shown = farm("--help", cwd=tmp_path, extra_env={"PYTHONPATH": "."}, timeout=120)
    assert shown.returncode == 0 and "verify" in shown.stdout, shown.stdout + shown.stderr


def test_the_helper_gives_bytes_and_raises_only_when_asked(tmp_path: Path) -> None:
    config = tmp_path / "farm.yaml"  # no such file: a refused command
    said = farm("jobs", "--config", str(config), cwd=tmp_path, text=False, timeout=120)
    assert isinstance(said.stderr, bytes) and said.returncode != 0, said
    try:
        farm("jobs", "--config", str(config), cwd=tmp_path, check=True, timeout=120)
    except subprocess.CalledProcessError as refused:
        assert refused.returncode == said.returncode, (refused.returncode, said.returncode)
    else:
        raise AssertionError("check=True let a failed command pass")
