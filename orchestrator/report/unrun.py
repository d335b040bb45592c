"""The farm file's nodes with nothing on record: no column in the matrix.

The matrix heads every node on record, so a node the farm file lists but that never ran
(the course's t4, a100 and h100 in farm.yaml, placeholders until the course sets them up)
left no trace on the site: a reviewer asking "which kernels never ran on our T4?" read
silence, and saw an "NVIDIA H100 80GB HBM3" column (the lent h100-lent) beside a farm.yaml
whose own h100 never ran (review 108). The index names each such node, and a column of the
same card that is another node's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config.farm import Farm


@dataclass(frozen=True)
class UnrunNode:
    name: str
    file: str  # the farm file that lists it
    gpu: str | None  # as the farm file declares it: no probe ever read this node
    cc: str | None
    enabled: bool
    same_card: tuple[str, ...]  # other nodes' columns of the card this node declares


def unrun_nodes(farm: Farm | None, columns: list[Any]) -> list[UnrunNode]:
    """Each node of `farm` none of whose columns (standing.Column) is in the matrix, by name."""
    if farm is None:
        return []
    on_record = {c.node for c in columns}
    found: list[UnrunNode] = []
    for name, spec in sorted(farm.nodes.items()):
        if on_record.intersection(spec.columns(name)):
            continue
        gpu = spec.gpu
        # the same card under another name is not this node's verdict (a lent machine, a renamed node)
        same = tuple(sorted({c.node for c in columns if gpu and c.device == gpu}))
        found.append(UnrunNode(name, farm.file.name, gpu, str(spec.cc) if spec.cc else None, spec.enabled, same))
    return found
