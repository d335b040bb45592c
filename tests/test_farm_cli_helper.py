"""Tests run the farm's command line in a subprocess through tests/farm_cli.py only.

Fourteen private copies of a `farm(*args)` helper drifted apart (one put this checkout on
PYTHONPATH, the others ran whatever farm the virtual environment had installed), and the drift
hid a failing change. These tests fail the day a test file grows its own copy again, or a test
body runs the farm (or Python importing it) with its own subprocess call and without farm_cli's
argv and environment: the same drift, inline (round 114 converted the last of those)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

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


# ------------------------------------------------------------ a test's own subprocess of the farm

# every way the subprocess module starts a program
STARTS_A_PROGRAM = RUNS_TO_THE_END | {"Popen"}
# the farm's command line spelled out instead of farm_argv(): `-m orchestrator.cli`, in an argv
# list or a shell line
SPELLS_OUT_THE_CLI = re.compile(r"(^orchestrator\.cli$)|(-m\s+orchestrator\b)")
# Python code that imports the farm, run with `python -c`
IMPORTS_THE_FARM = re.compile(r"^\s*(import|from)\s+orchestrator\b", re.MULTILINE)
# what gives a subprocess this checkout first on PYTHONPATH
CHECKOUT_ENV = frozenset({"farm_env"})


def _called_name(call: ast.Call) -> str | None:
    """`name` of a call to `name(...)` or `module.name(...)`."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _prose(tree: ast.AST) -> set[int]:
    """The ids of the bare string statements (docstrings, prose): they run nothing."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _scopes(tree: ast.Module) -> dict[int, ast.AST]:
    """Each node's id -> the innermost function (else the module) it is in."""
    scope_of: dict[int, ast.AST] = {}

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            scope_of[id(child)] = scope
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else scope
            visit(child, inner)

    visit(tree, tree)
    return scope_of


def _assigned(name: str, scope: ast.AST) -> list[ast.AST]:
    """What `name` is given in `scope`: its assignments' values (none for a parameter). A
    module's are its own statements', not those inside its functions."""
    if isinstance(scope, ast.Module):
        statements = [s for s in scope.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        nodes = [node for statement in statements for node in ast.walk(statement)]
    else:
        nodes = list(ast.walk(scope))
    values: list[ast.AST] = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            values.append(node.value)
    return values


def _resolved(expr: ast.AST, scopes: list[ast.AST], depth: int = 3) -> list[ast.AST]:
    """`expr`'s nodes, with what each name in it is assigned in `scopes` (the function the call
    is in, then the module), a few names deep: `argv = farm_argv(...)`, then `run(argv)`."""
    found = list(ast.walk(expr))
    if depth == 0:
        return found
    for node in list(found):
        if isinstance(node, ast.Name):
            for scope in scopes:
                if values := _assigned(node.id, scope):
                    for value in values:
                        found.extend(_resolved(value, scopes, depth - 1))
                    break
    return found


def _gives_the_checkout(nodes: list[ast.AST], known: set[str] | frozenset[str]) -> bool:
    return any(isinstance(node, ast.Call) and _called_name(node) in known for node in nodes)


def env_helpers(source: str) -> set[str]:
    """The functions in one file that return an environment made by farm_env (such as
    test_faults.cli_env): a subprocess given what they return has this checkout first too."""
    tree = ast.parse(source)
    helpers: set[str] = set()
    while True:
        known = CHECKOUT_ENV | helpers
        more = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            and any(
                isinstance(inner, ast.Return)
                and inner.value is not None
                and _gives_the_checkout(_resolved(inner.value, [node, tree]), known)
                for inner in ast.walk(node)
            )
        }
        if more <= helpers:
            return helpers
        helpers |= more


def _subprocess_calls(tree: ast.AST) -> list[ast.Call]:
    return [
        call
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "subprocess"
        and call.func.attr in STARTS_A_PROGRAM
    ]


def _is_the_farm_script(node: ast.AST) -> bool:
    """An argv list whose program is the `farm` script: `["farm", ...]`, `[".venv/bin/farm", ...]`."""
    return (
        isinstance(node, ast.List | ast.Tuple)
        and bool(node.elts)
        and isinstance(node.elts[0], ast.Constant)
        and isinstance(node.elts[0].value, str)
        and Path(node.elts[0].value).name == "farm"
    )


def unguarded_farm_runs(source: str, helpers: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The places in one file's source that run the farm (or Python code importing it) in a
    subprocess without farm_cli: the command line spelled out (`-m orchestrator.cli`, an argv
    whose program is the `farm` script) instead of farm_argv(); farm_argv(), or `python -c
    "import orchestrator..."`, run without an environment from farm_env() (or from a function
    returning one: `helpers`, and this file's own), so that the Python started imports whatever
    farm the virtual environment installed. Prose (docstrings) and imports run nothing."""
    tree = ast.parse(source)
    prose = _prose(tree)
    known = CHECKOUT_ENV | set(helpers) | env_helpers(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in prose
            and SPELLS_OUT_THE_CLI.search(node.value)
        ):
            found.append(f"line {node.lineno}: spells out the farm's command line, not farm_argv()")
    scope_of = _scopes(tree)
    for call in _subprocess_calls(tree):
        argv = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
        if argv is None:
            continue
        scopes = [scope_of.get(id(call), tree), tree]
        nodes = _resolved(argv, scopes)
        if any(_is_the_farm_script(node) for node in nodes):
            found.append(f"line {call.lineno}: runs the `farm` script itself, not farm_argv()")
        runs_the_farm = any(isinstance(node, ast.Call) and _called_name(node) == "farm_argv" for node in nodes)
        imports_it = any(
            isinstance(node, ast.Constant) and isinstance(node.value, str) and IMPORTS_THE_FARM.search(node.value)
            for node in nodes
        )
        if not (runs_the_farm or imports_it):
            continue
        env = next((k.value for k in call.keywords if k.arg == "env"), None)
        if env is None or not _gives_the_checkout(_resolved(env, scopes), known):
            what = "farm_argv()" if runs_the_farm else "Python that imports the farm"
            found.append(f"line {call.lineno}: runs {what} without farm_env()'s environment")
    return found


def test_no_test_runs_the_farm_in_a_subprocess_without_the_helper() -> None:
    """A test's own subprocess.run or Popen of the farm is the drift of a private copy, inline:
    each one goes through farm_cli (farm(), or farm_argv() with farm_env()'s environment)."""
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50, files  # the scan reads the suite, not an empty folder
    # this file is skipped: its sample sources below are strings the scan would read
    sources = {path: path.read_text() for path in files if path not in (HELPER, Path(__file__).resolve())}
    helpers = set().union(*(env_helpers(source) for source in sources.values()))
    assert "cli_env" in helpers, helpers  # test_faults.cli_env, imported by others: the scan sees through it
    found = {
        str(path.relative_to(TESTS)): runs
        for path, source in sources.items()
        if (runs := unguarded_farm_runs(source, helpers))
    }
    assert not found, f"run the farm through tests/farm_cli.py (farm(), or farm_argv() with farm_env()): {found}"


BAD_RUNS = {
    "a test's own run, the argv spelled out": """
def test_x(tmp_path):
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "verify"], check=False)
""",
    "the argv spelled out beforehand, Popen": """
def test_x(tmp_path):
    argv = [sys.executable, "-m", "orchestrator.cli", "verify", "--all"]
    with subprocess.Popen(argv, start_new_session=True) as night:
        pass
""",
    "a shell line": """
def test_x(tmp_path):
    line = f"cd {tmp_path} && {sys.executable} -m orchestrator.cli verify --all"
    subprocess.run(["/bin/sh", "-c", line], env=farm_env())
""",
    "the installed script": """
def test_x(tmp_path):
    subprocess.run([".venv/bin/farm", "verify", "--all"], env=farm_env())
""",
    "the shared argv, the environment left as it is": """
def test_x(tmp_path):
    subprocess.Popen(farm_argv("verify"), start_new_session=True)
""",
    "the shared argv, an environment of its own": """
def test_x(tmp_path):
    argv = farm_argv("verify")
    subprocess.run(argv, env={**os.environ, "FARM_DATABASE": "sqlite:///x.db"})
""",
    "Python importing the farm, its environment its own": """
CHECK = "import json\\nfrom orchestrator.run import noderunner\\n"
def test_x(tmp_path):
    subprocess.run([sys.executable, "-c", CHECK], env={**os.environ, "PYTHONPATH": "."})
""",
    "Python importing the farm, a helper's environment that is not farm_env's": """
def own_env(root):
    return {**os.environ, "XDG_CACHE_HOME": str(root)}
def test_x(tmp_path):
    subprocess.run([sys.executable, "-c", "import orchestrator"], env=own_env(tmp_path))
""",
}

GOOD_RUNS = {
    "the helper": """
def test_x(tmp_path):
    done = farm("verify", "--all", cwd=tmp_path)
""",
    "Popen with the shared argv and environment": """
def test_x(tmp_path):
    with subprocess.Popen(farm_argv("verify"), env=farm_env(), start_new_session=True) as night:
        pass
""",
    "both named beforehand": """
def test_x(tmp_path):
    argv = farm_argv("verify")
    env = farm_env(extra_env={"HOME": str(tmp_path)})
    subprocess.run([*argv, "--log", "/dev/full"], env=env)
""",
    "a helper returning farm_env's, spread into another": """
def cli_env(root):
    return farm_env(extra_env={"XDG_CACHE_HOME": str(root)})
def test_x(tmp_path):
    env = {**cli_env(tmp_path), "GIT_CONFIG_GLOBAL": "/dev/null"}
    subprocess.Popen(farm_argv("bisect"), env=env)
""",
    "a shell line from the shared argv": """
def test_x(tmp_path):
    line = shlex.join(farm_argv("show", "1"))
    subprocess.run(["bash", "-c", f"{line} | head -c 10"], env=farm_env())
""",
    "no farm at all": """
def test_x(tmp_path):
    subprocess.Popen(["sleep", "300"], env={**os.environ, "FARM_RUN": "dead0000dead"})
""",
    "prose and imports": '''
"""`python -m orchestrator.cli verify` is what cron runs."""
from orchestrator.cli import main
def test_x():
    """The CLI (`python -m orchestrator.cli`) runs."""
''',
}


def test_the_subprocess_scan_can_fail() -> None:
    """Each way a test ran the farm on its own is found; each way through farm_cli is not."""
    for shape, source in BAD_RUNS.items():
        assert unguarded_farm_runs(source), shape
    for shape, source in GOOD_RUNS.items():
        assert not unguarded_farm_runs(source), shape
    # another file's helper counts once the suite-wide scan names it
    imported = """
from test_faults import cli_env
def test_x(tmp_path):
    subprocess.run(farm_argv("verify"), env=cli_env(tmp_path))
"""
    assert unguarded_farm_runs(imported) and not unguarded_farm_runs(imported, {"cli_env"})


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


def _load_copys_helper(copy: Path) -> ModuleType:
    """The farm_cli.py of another checkout, imported under a name of its own: its CHECKOUT is
    that checkout, as it is for that checkout's tests."""
    spec = importlib.util.spec_from_file_location(f"farm_cli_of_{copy.name}", copy / "tests" / "farm_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_copy_of_the_checkout_runs_its_own_farm_not_the_installed_one(tmp_path: Path) -> None:
    """The point of the helper: a checkout other than the one the virtual environment installed
    (a clone in /tmp, its change under test) whose tests run the farm from another folder, CI's
    `PYTHONPATH=.` set, runs its own code. Here the copy's `farm --help` and its
    orchestrator/__init__.py say so; run without the helper, the same command from the same
    folder imports another farm, and what the copy changed is not there."""
    copy = tmp_path / "copy"
    shutil.copytree(CHECKOUT / "orchestrator", copy / "orchestrator", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests").mkdir()
    shutil.copy2(HELPER, copy / "tests" / "farm_cli.py")
    mark = f"copy-{secrets.token_hex(6)}"
    base = copy / "orchestrator" / "cli" / "base.py"
    said = "A multi-architecture GPU test farm"
    assert said in base.read_text(), "the farm's help text moved: change the one this test edits"
    base.write_text(base.read_text().replace(said, f"{said} ({mark})", 1))
    init = copy / "orchestrator" / "__init__.py"
    init.write_text(f"{init.read_text()}\n__copy_mark__ = {mark!r}\n")
    elsewhere = tmp_path / "elsewhere"  # neither checkout: `PYTHONPATH=.` finds no farm here
    elsewhere.mkdir()
    helper = _load_copys_helper(copy)
    assert copy.resolve() == helper.CHECKOUT, helper.CHECKOUT

    shown = helper.farm("--help", cwd=elsewhere, extra_env={"PYTHONPATH": "."}, timeout=120)
    assert shown.returncode == 0 and f"({mark})" in shown.stdout, shown.stdout + shown.stderr
    probe = "import orchestrator; print(orchestrator.__file__, getattr(orchestrator, '__copy_mark__', None))"
    imported = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=helper.farm_env(extra_env={"PYTHONPATH": "."}),
        timeout=60,
        check=True,
    )
    where, got = imported.stdout.split()
    assert Path(where).resolve() == init.resolve() and got == mark, imported.stdout

    # the hazard itself: the same from the same folder without the helper runs another farm
    plain_env = {**os.environ, "PYTHONPATH": "."}
    plain = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=elsewhere, env=plain_env, timeout=60
    )
    assert mark not in plain.stdout, plain.stdout  # whichever farm it found, not the copy's
    plain_help = subprocess.run(
        farm_argv("--help"), capture_output=True, text=True, cwd=elsewhere, env=plain_env, timeout=120
    )
    assert mark not in plain_help.stdout, plain_help.stdout
