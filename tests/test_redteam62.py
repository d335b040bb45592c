"""Red-team round 62: the node's toolchain drifts under the farm, between its probe and a build."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nodes import CARDS, Fleet, query, standin_variant
from test_redteam52 import REAL_NVCC, verify
from test_verdicts import MIN75

from orchestrator.run.stages.build import BuildStage


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path / "fleet")
    yield fleet
    fleet.stop()


def before_first_build(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """CHANGE done once, after the node's probe and before its first build: an admin's upgrade,
    a module's wrapper rewritten, landing while the farm runs."""
    original = BuildStage._build
    done: list[bool] = []

    def changed_then_built(self: BuildStage) -> str:
        if not done:
            done.append(True)
            change()
        return original(self)

    monkeypatch.setattr(BuildStage, "_build", changed_then_built)


def wrapper(path: Path, mode: str) -> None:
    path.write_text(f'#!/bin/sh\nexec {REAL_NVCC} -DMODE_{mode} "$@"\n')
    path.chmod(0o755)


VARIANTS = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build="{nvcc} -O1 -DMIN_CC=75 -o {binary} {sources}")}


def test_nvcc_replaced_between_the_probe_and_the_build_is_no_pass_and_caches_nothing(
    fleet: Fleet, tmp_path: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build key and the recorded nvcc come from the probe; no build looked at nvcc again. The
    node's nvcc (a site's wrapper) building failing numbers at the probe, replaced by one building
    passing ones before the build: the cell passed, certified under the probed nvcc's key, and
    that binary was reused once the probed nvcc was back. Now the build checks nvcc's file (and
    the host compilers') against the probe's: the cell is the node's failure, nothing is cached,
    and the next run, under the restored nvcc, builds afresh and fails its numbers."""
    node = fleet.add("t4", CARDS["t4"])
    nvcc = node.node_bin / "nvcc-site"
    wrapper(nvcc, "FAILNUM")
    before_first_build(monkeypatch, lambda: wrapper(nvcc, "PASS"))
    first = verify(node, tmp_path / "farm", VARIANTS, nvcc=str(nvcc))
    wrapper(nvcc, "FAILNUM")  # rolled back
    second = verify(node, tmp_path / "farm", VARIANTS, nvcc=str(nvcc))
    rows = query(tmp_path / "farm" / "results.db", "SELECT outcome, build_cached, reason FROM results ORDER BY run_id")
    assert "pass" not in first and first == {"infra-error": 1}, (first, [dict(r) for r in rows])
    assert "changed on the node since its probe" in rows[0]["reason"], rows[0]["reason"]
    assert second == {"fail": 1}, (second, [dict(r) for r in rows])
    assert [r["build_cached"] for r in rows] == [0, 0]


def test_a_host_compiler_replaced_between_the_probe_and_the_build_is_no_pass(
    fleet: Fleet, tmp_path: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host compilers' files are in the build key as the probe saw them; g++ on the node's
    PATH replaced (an upgrade, a wrapper) after the probe built the binary the farm then cached
    under the probed g++'s key. Now the build sees the change: the node's failure, not cached."""
    node = fleet.add("t4", CARDS["t4"])
    shim = node.node_bin / "g++"

    def gxx(mode: str) -> None:
        shim.write_text(f'#!/bin/sh\nexec /usr/bin/g++ -DMODE_{mode} "$@"\n')
        shim.chmod(0o755)

    gxx("FAILNUM")
    before_first_build(monkeypatch, lambda: gxx("PASS"))
    variants = {"p": standin_variant("PASS", MIN75, "MIN_CC=75", build="g++ -O1 -DMIN_CC=75 -o {binary} {sources}")}
    first = verify(node, tmp_path / "farm", variants)
    rows = query(tmp_path / "farm" / "results.db", "SELECT outcome, build_cached, reason FROM results ORDER BY run_id")
    assert first == {"infra-error": 1}, (first, [dict(r) for r in rows])
    assert "g++" in rows[0]["reason"] or runner == "shell", rows[0]["reason"]


def test_a_compiler_variable_set_by_the_logins_start_up_file_after_the_probe_is_no_pass(
    fleet: Fleet, tmp_path: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVCC_APPEND_FLAGS (and the other compilers' variables) are in the key as the probe's login
    had them; a ~/.bashrc that set another after the probe (an admin, a kernel of the same user)
    reached the builds of later logins (a python3 per cell, the shell scripts) unkeyed, and the
    binary it made passed under the probe's key. Now the build compares them to the probe's."""
    node = fleet.add("t4", CARDS["t4"])
    bashrc = node.home / ".bashrc"
    bashrc.write_text("export NVCC_APPEND_FLAGS=-DMODE_FAILNUM\n")
    before_first_build(monkeypatch, lambda: bashrc.write_text("export NVCC_APPEND_FLAGS=-DMODE_PASS\n"))
    first = verify(node, tmp_path / "farm", VARIANTS)
    rows = query(tmp_path / "farm" / "results.db", "SELECT outcome, build_cached, reason FROM results ORDER BY run_id")
    # the resident runner's builds have the environment of its own login, the probe's
    assert first == ({"fail": 1} if runner == "resident" else {"infra-error": 1}), (first, [dict(r) for r in rows])
