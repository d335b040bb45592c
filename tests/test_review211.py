"""Review round 211: the code's map, read as a newcomer reads it (issue 11), checked mechanically.

Broke (before -> after):

1. errors.py's drawn tree left out seven FarmError subclasses defined elsewhere (FarmChanged,
   StoreUnreachable, PageWriteError, SshdDropped, RunnerMute, ToolchainUnavailable,
   SlurmOutOfMemory): a newcomer reading the tree did not know they existed nor their exit codes.
   Now every subclass is drawn under its base.
2. orchestrator/lost_files.py, a classify rule (`replace(verdict, outcome=FAIL ...)`), sat outside
   classify/: a second place deciding outcomes. Now classify/lost_files.py.
3. classify/blame.py listed ("run", "sanitize") again beside outcomes.STAGES; now KERNEL_STAGES,
   a slice of the one tuple.
4. The README's module map named none of classify/evidence.py, guarded.py, nine transport/ and
   seven store/ modules. Now every module of those folders and of orchestrator/'s top level is
   named, and every module the map names exists.

The walkthrough itself (six stations, each name it mentions) is tests/test_walkthrough.py.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from orchestrator import errors
from orchestrator.outcomes import CELL_STAGES, STAGES

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "orchestrator"


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "migrations" not in p.parts)


def _farm_errors() -> dict[str, list[str]]:
    """Every class in the package that derives from FarmError -> its bases' names, read from the
    source (run/node/'s modules do not import on their own: they are one namespace on the node)."""
    bases: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]

    def is_farm_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        return name == "FarmError" or any(is_farm_error(b, seen | {name}) for b in bases.get(name, []) if b not in seen)

    return {name: b for name, b in bases.items() if name != "FarmError" and is_farm_error(name)}


def _drawn_tree() -> dict[str, str]:
    """errors.py's drawn tree: each class -> the class it is drawn under."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^(\s*(?:[│ ]\s*)*?)(?:[├└]── )?(\w+)\s{2,}", line)
        if not m or not m.group(2)[0].isupper():
            continue
        depth = len(m.group(1)) + (4 if "──" in line[: m.end(2)] else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[m.group(2)] = stack[-1][1]
        stack.append((depth, m.group(2)))
    return parents


def test_every_farm_error_subclass_is_drawn_under_its_base_in_errors_py() -> None:
    """Before: seven subclasses (FarmChanged, StoreUnreachable, PageWriteError, SshdDropped, RunnerMute,
    ToolchainUnavailable, SlurmOutOfMemory) missing from the tree. Figure: the tree drawn at errors.py's top."""
    defined, drawn = _farm_errors(), _drawn_tree()
    assert "InfraError" in drawn and drawn["HostKeyError"] == "ConnectError"  # the parser reads the tree
    assert sorted(set(defined) - set(drawn)) == [], "FarmError subclasses not in errors.py's drawn tree"
    assert sorted(set(drawn) - set(defined)) == [], "the tree draws classes that no longer exist"
    wrong = {name: (parent, defined[name]) for name, parent in drawn.items() if parent not in defined[name]}
    assert wrong == {}, "drawn under a class that is not its base"


def _outside(path: Path, *folders: str) -> bool:
    rel = path.relative_to(PKG).as_posix()
    return not any(rel == f or rel.startswith(f + "/") for f in folders)


def test_no_module_outside_classify_decides_a_verdict() -> None:
    """Before: orchestrator/lost_files.py turned a run's verdict into fail / missing-refusal with
    `replace(verdict, outcome=...)`. Figure: classify/ alone makes a Verdict or sets its outcome (a
    not-run row the store writes for a cell that never finished has no evidence to classify)."""
    allowed = {"store/not_run_rows.py"}
    found = []
    for path in _modules():
        rel = path.relative_to(PKG).as_posix()
        if not _outside(path, "classify", "outcomes.py") or rel in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            sets_outcome = any(k.arg == "outcome" and "Outcome." in ast.unparse(k.value) for k in node.keywords)
            if name == "Verdict" or sets_outcome:
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def _stage_lists(path: Path) -> list[tuple[int, list[str]]]:
    """Collection literals (tuple, list, set, dict keys) holding two or more stage names."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) or not items:
            continue
        names = [i.value for i in items if isinstance(i, ast.Constant) and i.value in STAGES]
        if len(names) >= 2:
            hits.append((node.lineno, names))
    return hits


def test_stage_names_are_listed_once_in_outcomes_stages() -> None:
    """Before: classify/blame.py's `stage in ("run", "sanitize")`. Figure: outcomes.STAGES and its slices.
    run/node/stages.py's dispatch table is the node's side (it cannot import outcomes.py): its keys
    must be the cell's stages, in their order."""
    node_side = PKG / "run" / "node" / "stages.py"
    found = [
        (path.relative_to(PKG).as_posix(), line, names)
        for path in _modules()
        if path not in (PKG / "outcomes.py", node_side)
        for line, names in _stage_lists(path)
    ]
    assert found == []
    [(_line, table)] = _stage_lists(node_side)
    assert tuple(table) == CELL_STAGES


def _module_map() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Layout and data flow") :].split("```")[1]


def test_every_module_the_readme_map_names_exists() -> None:
    """Figure: each `NAME.py` and station folder in README's "Layout and data flow" is a file or folder
    of the package (renaming a module without the map fails here)."""
    block = _module_map()
    files = {p.name for p in PKG.rglob("*.py")}
    assert sorted(set(re.findall(r"\b(\w+\.py)\b", block)) - files) == []
    for station in re.findall(r"→\s+(\w+)/", block):
        assert (PKG / station).is_dir(), station


def test_the_map_names_every_module_of_its_small_stations() -> None:
    """Before: classify/evidence.py, guarded.py, nine transport/ and seven store/ modules unnamed.
    Figure: every module of classify/, transport/, store/ and orchestrator/'s top level is in the map."""
    named = set(re.findall(r"\b(\w+\.py)\b", _module_map()))
    folders = [PKG, PKG / "classify", PKG / "transport", PKG / "store"]
    unnamed = [
        p.relative_to(PKG).as_posix()
        for folder in folders
        for p in sorted(folder.glob("*.py"))
        if p.name != "__init__.py" and p.name not in named
    ]
    assert unnamed == []


def _prose(path: Path) -> list[tuple[int, str]]:
    """A module's comments and docstrings, with their line numbers."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        docstring = tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU")[:3] in ('"""', "'''")
        if tok.type == tokenize.COMMENT or docstring:
            found.append((tok.start[0], tok.string))
    return found


def test_comments_and_docstrings_name_only_files_that_exist() -> None:
    """Before: classify/evidence.py named build_errors.py (its function moved to run/stages/failure_words.py),
    report/model.py and store/migrations/env.py named store.py (split into store/ long ago).
    Figure: every `NAME.py` a comment or docstring of the package names is a file of the repository."""
    files = {p.name for p in REPO.rglob("*.py") if ".venv" not in p.parts and ".git" not in p.parts}
    stale = [
        f"{path.relative_to(PKG).as_posix()}:{line}: {name}"
        for path in sorted(PKG.rglob("*.py"))
        for line, text in _prose(path)
        for name in re.findall(r"(?<![\w.-])(?:[\w/]*/)?([A-Za-z_]\w*\.py)\b", text)
        if name not in files
    ]
    assert stale == []
