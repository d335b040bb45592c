"""The certification ledger as plain data, for the JSON export (export.as_json): per kernel its
inputs, header claims, flags, and per compute capability its state, whether it is certified now
(VERIFIED with no flag voiding it: ledger.KernelLedger.voided) and the certificates behind it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.report.ledger import KernelLedger


def _iso(moment: datetime) -> str:
    """ISO 8601 in UTC, as export.utc_iso writes it (SQLite hands stored UTC times back without a zone)."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def ledger_records(ledgers: list[KernelLedger]) -> list[dict[str, Any]]:
    return [
        {
            "kernel": e.kernel,
            "path": e.path,
            "sha256": e.sha256,
            "files": [{"path": path, "sha256": sha} for path, sha in e.files.items()],
            "dependencies": [
                {"name": name, "version": d.get("version"), "sha256": d.get("digest")}
                for name, d in e.dependencies.items()
            ],
            "header_claims": [{"status": c.status, "date": c.date, "text": c.text} for c in e.claims],
            "capabilities": {
                cc: {
                    "state": s.state,
                    # the one field a CI gate reads: VERIFIED and no flag voiding it (removed, contract-changed...)
                    "certified": e.certified(cc),
                    "voided_by": list(e.voided.get(cc, [])),
                    "certificates": [
                        {
                            "result_id": c.result_id,
                            "run_id": c.run_id,
                            "farm_commit": c.farm_commit,  # its run's (certificates.py)
                            "date": _iso(c.when),
                            "node": c.node,
                            "gpu": c.gpu,
                            "gpu_uuid": c.gpu_uuid,
                            "identity": c.identity,
                            "driver": c.driver,
                            "nvcc": c.nvcc,
                            "variant": c.variant,
                            "build_command": c.build_command,
                            "binary_sha256": c.binary_sha256,
                            "code_path": c.code_path,
                            "output": c.output,
                            "cuda_error_waived": c.cuda_error_waived,
                        }
                        for c in s.current
                    ],
                }
                for cc, s in e.capabilities.items()
            },
            "flags": [{"kind": kind, "text": text} for kind, text in e.flags],
        }
        for e in ledgers
    ]
