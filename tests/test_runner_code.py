"""The node runner's compiled code, kept beside the farm's own bytecode (run/runner_code.py)."""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path

import pytest

from orchestrator.run import runner_code

SOURCE = b"x = 41 + 1\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(runner_code, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(runner_code, "_COMPILED", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path


def compiles(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every compile() the runner's code asks for, from here on."""
    seen: list[bytes] = []

    def counted(source, *args, **kwargs):
        seen.append(source)
        return compile(source, *args, **kwargs)

    monkeypatch.setattr(runner_code, "compile", counted, raising=False)
    return seen


def test_a_fresh_process_loads_the_kept_code_and_compiles_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = runner_code.compiled(SOURCE)
    [kept] = cache.glob("farm-runner.*.marshal")
    assert kept.read_bytes() == code
    namespace: dict = {}
    exec(marshal.loads(code), namespace)
    assert namespace["x"] == 42
    monkeypatch.setattr(runner_code, "_COMPILED", {})  # as a new process starts
    seen = compiles(monkeypatch)
    assert runner_code.compiled(SOURCE) == code
    assert seen == []


def test_a_damaged_kept_file_is_compiled_over_never_sent(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner_code.compiled(SOURCE)
    [kept] = cache.glob("farm-runner.*.marshal")
    kept.write_bytes(b"\xff\x00 not marshal")
    monkeypatch.setattr(runner_code, "_COMPILED", {})
    seen = compiles(monkeypatch)
    code = runner_code.compiled(SOURCE)
    assert seen == [SOURCE]
    assert marshal.loads(code) is not None and kept.read_bytes() == code


def test_older_runners_of_the_same_interpreter_go_but_not_the_newest_few(cache: Path) -> None:
    """One per upgrade would pile up; one in all made two patch versions of a minor (one tag)
    delete each other's and compile on every run (a red-team finding)."""
    other_interpreter = cache / "farm-runner.cpython-99.0123.marshal"
    other_interpreter.write_bytes(b"kept for that python")
    sources = [f"x = {n}\n".encode() for n in range(5)]
    for n, source in enumerate(sources):
        runner_code.compiled(source)
        kept = runner_code.cache_file(source)
        os.utime(kept, (1000 + n, 1000 + n))  # written in this order, whatever the clock's step
    mine = {p.name for p in cache.glob(f"farm-runner.{sys.implementation.cache_tag}.*.marshal")}
    assert mine == {runner_code.cache_file(s).name for s in sources[-runner_code.KEEP :]}
    assert other_interpreter.exists()


def test_kept_even_where_python_writes_no_pyc(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTHONDONTWRITEBYTECODE (set on this VM's image and the GPU machine's) is the import
    system's: honoured here, every run would compile the runner again."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    code = runner_code.compiled(SOURCE)
    assert [p.read_bytes() for p in cache.glob("farm-runner.*.marshal")] == [code]


def test_no_file_where_python_keeps_its_bytecode_elsewhere(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "pycache_prefix", str(cache / "elsewhere"))
    assert marshal.loads(runner_code.compiled(SOURCE)) is not None
    assert list(cache.iterdir()) == []


def test_a_cache_folder_that_cannot_be_written_only_costs_the_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    monkeypatch.setattr(runner_code, "CACHE_DIR", blocked / "__pycache__")
    monkeypatch.setattr(runner_code, "_COMPILED", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert marshal.loads(runner_code.compiled(SOURCE)) is not None
