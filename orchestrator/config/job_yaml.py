"""`farm jobs`' printing: a loaded job as one YAML document, each key commented with
where it came from (provenance.py), so what a kernel's header gave, what its job file
changed and what is a convention can be told apart at a glance."""

from __future__ import annotations

from typing import Any

import yaml

from orchestrator.config.job_spec import JobSpec
from orchestrator.config.provenance import Provenance


def _flow(value: Any) -> str:
    # a one-element flow sequence, unwrapped: any value as one line of YAML
    text = yaml.safe_dump([value], default_flow_style=True, width=1 << 30, allow_unicode=True, sort_keys=False)
    return text.strip()[1:-1]


def _comment(where: str) -> str:
    return "  # " + " ".join(where.split())


def job_yaml(kernel: str, spec: JobSpec, provenance: Provenance) -> str:
    """The job as farm reads it, one YAML document: every key a job file, the
    header or a convention set, each commented with where it came from. Keys
    not shown hold the schema's defaults (README, "Job files")."""
    lines = [f"# {kernel}: {provenance.origin} (keys not shown: defaults)"]
    for key, value in spec.model_dump(mode="json", exclude_none=True).items():
        if key != "variants":
            if key in provenance.fields:
                lines.append(f"{key}: {_flow(value)}{_comment(provenance.of(key))}")
            continue
        lines.append("variants:")
        for name, variant in value.items():
            lines.append(f"  {name}:{_comment(provenance.of(f'variants.{name}'))}")
            for vkey, vvalue in variant.items():
                path = f"variants.{name}.{vkey}"
                if path in provenance.fields:
                    lines.append(f"    {vkey}: {_flow(vvalue)}{_comment(provenance.of(path))}")
    return "\n".join(lines) + "\n"
