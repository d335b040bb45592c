"""The certificates a ledger shows, read from the store with their evidence: the result, its
node's probe, and the farm commit of its run.

The farm commit is the reviewer's "at which commit": the course's kernels live in the farm's
repository, so the commit a certifying run was at holds the bytes it certified (with "+dirty"
where the tree differed from it, as the run recorded; the identity is what binds the bytes).
The certificate had named its run and card but not that commit, on the kernel page and in the
JSON export (review 97).
"""

from __future__ import annotations

from collections import defaultdict

from orchestrator.cuda_waiver import was_waived
from orchestrator.report.ledger import Certificate
from orchestrator.store.database import Store


def certificates(store: Store, result_ids: list[int]) -> dict[str, list[Certificate]]:
    """kernel -> the certificates of these results (certifying passes), in result order."""
    rows = store.results_with_snapshots(result_ids)
    commits: dict[int, str | None] = {}
    for result, _snap in rows:  # a few runs: the first and latest certifying pass per identity and CC
        if result.run_id not in commits:
            run = store.run(result.run_id)
            commits[result.run_id] = run.farm_commit if run is not None else None
    found: dict[str, list[Certificate]] = defaultdict(list)
    for result, snap in rows:
        found[result.kernel].append(
            Certificate(
                result_id=result.id,
                run_id=result.run_id,
                when=result.started_at,
                identity=result.identity or "",
                variant=result.variant,
                node=result.node,
                gpu=result.device or snap.gpu_name or "",
                cc=result.cc or "",
                driver=snap.driver,
                nvcc=snap.nvcc_version,
                build_command=result.build_command,
                code_path=result.code_path,
                output=(result.stdout or b"").decode("utf-8", "replace"),
                stages=dict(result.stage_details or {}),
                files=dict(result.sources or {}),
                dependencies=dict(result.dependencies or {}),
                gpu_uuid=result.gpu_uuid,
                farm_commit=commits.get(result.run_id),
                cuda_error_waived=was_waived(result),
                binary_sha256=result.binary_sha256,
            )
        )
    return found
