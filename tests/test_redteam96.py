"""Red-team round 96: machines with several cards, and cards that are not what they seem.

Real sshd nodes whose nvidia-smi stand-in lists cards of one name and two compute capabilities
(nvidia-smi's "NVIDIA Graphics Device", the name of every card its driver has no name for), one
card on two rows, and kernel commands whose launchers start the kernel on another machine."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner
from nodes import Card, Fleet, query, standin_job, standin_variant
from test_verdicts import run

from orchestrator.cli import main
from orchestrator.run.snapshot import Gpu

# what nvidia-smi names a card its driver has no marketing name for (an engineering sample, a
# card newer than the driver's table): two such cards of two generations read alike
UNNAMED = "NVIDIA Graphics Device"


def test_two_cards_of_one_name_and_two_ccs_are_two_columns_each_judged_on_its_own_cc(
    ssh_fleet: Fleet, make_farm, tmp_path: Path
) -> None:
    """A node's cards were grouped into the matrix's columns by name alone, the column's CC its
    first card's: on a node of two "NVIDIA Graphics Device" cards, a CC 10.0 and a CC 12.0,
    each cell went to either card, and one that ran on the 12.0 card was judged against 10.0
    and stored under CC 10.0 (results.cc) beside that card's UUID: a kernel that runs on 12.0
    only passed, certifying CC 10.0, where it refuses. Cards of one name and several CCs are now
    a column each, named with the CC, and each cell is judged and stored on its own card's."""
    cards = [Card(UNNAMED, "10.0"), Card(UNNAMED, "12.0")]
    node = ssh_fleet.add(f"unnamed-{tmp_path.name[-12:]}", cards)
    prelude = tmp_path / "slow.sh"
    prelude.write_text("sleep 1\n")  # the variants' runs overlap, over both cards
    variants = {f"v{i}": standin_variant("PASS", {"min": "10.0"}, "EXACT_CC=120", prelude=prelude) for i in range(3)}
    try:
        config = make_farm(tmp_path, {"n": node.farm_entry(tmp_path / "work")}, [standin_job("standin", variants)])
        _, summary = run(config)
    finally:
        node.stop()
    cc_of = {card.uuid(i): card.cc for i, card in enumerate(node.cards)}
    found = query(tmp_path / "results.db", "SELECT * FROM results WHERE run_id = ?", summary.run_id)
    said = [(r["variant"], r["device"], r["gpu_uuid"], r["cc"], r["outcome"]) for r in found]
    for r in found:
        assert r["cc"] == cc_of[r["gpu_uuid"]], said  # stored under the CC of the card it ran on
    assert not [r for r in found if r["outcome"] == "pass" and r["cc"] == "10.0"], said
    # every variant on each card: the 10.0 card's refusals are the kernel's own (its contract serves it)
    assert sorted((r["cc"], r["outcome"]) for r in found) == sorted(
        [("10.0", "unexpected-refusal")] * 3 + [("12.0", "pass")] * 3
    ), said
    assert len({r["device"] for r in found}) == 2 and all("CC" in r["device"] for r in found), said
    # the matrix's heads: both columns are cards the node's probe found (no "gone-card" flag)
    assert CliRunner().invoke(main, ["report", "--config", str(config)]).exit_code == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    heads = dict(re.findall(r'<th data-node="n" data-device="([^"]+)">(.*?)</th>', index, re.S))
    assert sorted(heads) == [f"{UNNAMED} (CC 10.0)", f"{UNNAMED} (CC 12.0)"], heads
    assert not [h for h in heads.values() if "gone-card" in h], heads


def _snapshot_devices(gpus: list[Gpu]) -> dict[str, list[Gpu]]:
    from orchestrator.run.snapshot import NodeSnapshot

    snap = NodeSnapshot("n", "/w", "h", "Linux", None, None, None, None, len(gpus), "nvcc", None, "", None, None)
    return NodeSnapshot(**{**snap.__dict__, "gpus": tuple(gpus)}).devices()


def test_cards_of_one_name_and_one_cc_still_share_a_column() -> None:
    from orchestrator.config.capability import ComputeCapability

    cc = ComputeCapability.parse("7.5")
    gpus = [Gpu(0, "GPU-a", "Tesla T4", cc, "15360 MiB"), Gpu(1, "GPU-b", "Tesla T4", cc, "15360 MiB")]
    assert list(_snapshot_devices(gpus)) == ["Tesla T4"]
