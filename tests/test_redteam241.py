"""Red-team round 241: a known failure declared everywhere by a range that admits every case.

Broke (before/after): `when: {}` and `when: {nvcc: ""}` are refused at load (a failure declared
everywhere hides every one), but `when: {nvcc: ">=0"}` (or `>0.0`, `!=1.0`) admits every nvcc, and
`when: {cc: {min: "1.0"}}` every card: both loaded, and the variant's failure on every card under
every nvcc was `known-failure`, as expected, exit 0. Now refused at load, naming the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_header_jobs import farm_dir, refused
from test_review205 import _job

from orchestrator.config.farm import load_farm


def _variants(when: str) -> str:
    return (
        "\n          sm75:\n            build: '{nvcc} -o {binary} {sources}'\n            cc: {min: '7.5'}\n"
        f"            known_failures: [{{when: {when}, outcome: fail, reason: wrong numbers}}]"
    )


@pytest.mark.parametrize("when", ["{nvcc: '>=0'}", "{nvcc: '>0.0'}", "{nvcc: '!=1.0', cc: {min: '7.5'}}"])
def test_a_known_failure_for_every_nvcc_is_refused(tmp_path: Path, when: str) -> None:
    """Before: loaded; the variant's fail on every card under every nvcc was `known-failure`, exit 0.
    Figure: refused at load naming `when.nvcc`, saying the range covers every nvcc."""
    err = refused(farm_dir(tmp_path, {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": _job(_variants(when))}))
    assert err.key == "variants.sm75.known_failures[0].when.nvcc", str(err)
    assert "covers every nvcc" in str(err) and ">=0" in str(err), str(err)


@pytest.mark.parametrize("when", ["{cc: {min: '1.0'}}", "{cc: {min: '1.0'}, nvcc: null}"])
def test_a_known_failure_for_every_card_alone_is_refused(tmp_path: Path, when: str) -> None:
    """Before: loaded (`when:` names a CC range, which every card is in). Figure: refused at load
    naming `when`, as `when: {}` is."""
    err = refused(farm_dir(tmp_path, {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": _job(_variants(when))}))
    assert err.key == "variants.sm75.known_failures[0].when", str(err)
    assert "some card is outside of" in str(err), str(err)


@pytest.mark.parametrize(
    "when", ["{nvcc: '>=13.0,<13.1'}", "{cc: {min: '7.5'}}", "{cc: {max: '8.6'}}", "{cc: {exactly: '7.5'}}"]
)
def test_a_known_failure_that_names_where_it_applies_still_loads(tmp_path: Path, when: str) -> None:
    """A real range of either (every card under nvcc 13.0; every nvcc on the CC 7.5 card) loads as before.
    (`nvcc: ">=0"` beside a CC range is refused too, as review 205's `nvcc: ","` is: leave it out.)"""
    folder = farm_dir(tmp_path, {"k.cu": "int main() { return 0; }\n"}, {"k.yaml": _job(_variants(when))})
    assert load_farm(folder) is not None
