"""Nodes of the fleet's standing that are no longer in the fleet.

The matrix heads every node on record. A node removed from farm.yaml (decommissioned,
renamed, its card swapped under a new name) kept its green column, the kernel pages'
standing and the exports' passes with no word that the fleet no longer has it, flagged
stale only after `stale_after_days`; a renamed one showed two columns, both current to
the eye (a red-team finding). A reviewer certifying "this kernel runs on our fleet" read
a machine that is gone.

Several farm files may share one database (farms/hopper.yaml beside farm.yaml): a node
only another file lists is still the fleet's ("a local run never hides the Hopper
evidence"). So a node counts as gone only where the farm file its last run was of says
so: this farm's own file, or another one still on this machine whose `nodes:` no
longer lists it. A file that is not here (another machine's) judges nothing; nor does a
render without a farm (`farm=None`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.config.farm import Farm
from orchestrator.config.farm_spec import TOOLCHAIN_SEP
from orchestrator.report.ledger import KernelLedger
from orchestrator.store.database import Store


def listed_columns(path: Path) -> set[str] | None:
    """The matrix columns another farm file lists (NODE, or NODE+TOOLCHAIN as load_farm makes
    them), or None where it cannot be read: not here, not YAML, no `nodes:` mapping."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    if not isinstance(nodes, dict):
        return None
    found: set[str] = set()
    for name, spec in nodes.items():
        chains = spec.get("toolchains") if isinstance(spec, dict) else None
        if isinstance(chains, dict) and chains:  # one column per toolchain, as FarmSpec.columns names them
            found.update(f"{name}{TOOLCHAIN_SEP}{tc}" for tc in chains)
        else:
            found.add(str(name))
    return found


def same_file(a: Path, b: str) -> bool:
    try:
        return a.resolve() == Path(b).resolve()
    except (OSError, ValueError):
        return False


def departed(store: Store, farm: Farm | None, columns: list[Any]) -> dict[str, str]:
    """node -> why it is no longer in the fleet, for each node of `columns` (standing.Column:
    node, snapshot) that the farm file of its last probed run no longer lists."""
    if farm is None:
        return {}
    found: dict[str, str] = {}
    files: dict[int, str | None] = {}  # run -> its farm file (config_file), read once per run
    for node in sorted({c.node for c in columns if c.node not in farm.nodes and c.snapshot is not None}):
        snap = next(c.snapshot for c in columns if c.node == node and c.snapshot is not None)
        if snap.run_id not in files:
            run = store.run(snap.run_id)
            files[snap.run_id] = run.config_file if run is not None else None
        config = files[snap.run_id]
        if not config:
            continue
        if same_file(farm.file, config):
            where = farm.file.name
        elif (listed := listed_columns(Path(config))) is not None and node not in listed:
            where = config
        else:
            continue  # still listed by another farm file, or one this machine does not have
        renamed = [
            name
            for name, spec in sorted(farm.nodes.items())
            # a snapshot's address is [user@]host[:port]: the same machine under a new name
            if spec.host and (snap.address or "").rpartition("@")[2].rsplit(":", 1)[0] == spec.host
        ]
        also = f"; {', '.join(renamed)} in it now has its host" if renamed else ""
        found[node] = f"not in {where} (its last run, {snap.run_id}, was of that file){also}"
    return found


def flag_departed(
    ledgers: list[KernelLedger], gone: dict[str, str], cards: dict[tuple[str, str], str] | None = None
) -> list[KernelLedger]:
    """Flags each CC a kernel is VERIFIED on whose shown certificates are all of nodes that
    left the fleet, or of cards their node's probe no longer finds (`cards`: card_heads.gone_cards),
    `not-in-fleet`: the bytes passed there, but no node or card of the fleet now did."""
    cards = cards or {}
    for entry in ledgers if gone or cards else []:
        for cc in entry.verified_ccs:
            where = sorted({(c.node, c.gpu) for c in entry.capabilities[cc].current})
            why = [f"{node}: {gone[node]}" if node in gone else cards.get((node, gpu)) for node, gpu in where]
            if where and all(why):
                said = "; ".join(dict.fromkeys(str(w) for w in why))
                said = f"CC {cc} is VERIFIED by passes on nodes or cards that left the fleet ({said})."
                entry.flags.append(("not-in-fleet", said))
    return ledgers
