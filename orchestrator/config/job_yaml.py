"""`farm jobs`' printing: a loaded job as one YAML document, each key commented with
where it came from (provenance.py), so what a kernel's header gave, what its job file
changed and what is a convention can be told apart at a glance.

Every setting that decides what runs and how it is judged is printed, those the job
leaves to the schema marked `# default`: a newcomer reading only what they wrote did
not see the `run`, `inspect` and timeouts the farm used (review 181). The document
stays a job file: saved as jobs/KERNEL.yaml it loads to an equal job."""

from __future__ import annotations

from typing import Any

import yaml

from orchestrator.config.job_spec import JobSpec, VariantSpec
from orchestrator.config.provenance import Provenance

# a variant's keys that, unset (None), take the job's own: printed as a comment, since the
# value written on the variant would no longer follow the job's (and would not read back equal)
INHERITED = {"timeout": "the job's timeout", "cuda_error_text": "the job's cuda_error_text"}
# what decides nothing the farm runs or judges: left out where it is the default
UNSHOWN_DEFAULTS = {"description"}


def _flow(value: Any) -> str:
    # a one-element flow sequence, unwrapped: any value as one line of YAML
    text = yaml.safe_dump([value], default_flow_style=True, width=1 << 30, allow_unicode=True, sort_keys=False)
    return text.strip()[1:-1]


def _comment(where: str) -> str:
    return "  # " + " ".join(where.split())


def _shown(key: str, path: str, provenance: Provenance) -> bool:
    return key not in UNSHOWN_DEFAULTS or path in provenance.fields


def job_yaml(kernel: str, spec: JobSpec, provenance: Provenance) -> str:
    """The job as farm reads it, one YAML document: every key that decides what
    runs and how it is judged, each commented with where it came from (`default`:
    the schema's, README "Job files"); a variant's setting it takes from the job
    is a comment line with the job's value."""
    lines = [f"# {kernel}: {provenance.origin}; `# default`: a key the job leaves to the farm's default"]
    job = spec.model_dump(mode="json", exclude_none=True)  # nested: `cc: {min: '8.0'}`, not `exactly: null`
    for key, value in job.items():
        if key != "variants":
            if _shown(key, key, provenance):
                lines.append(f"{key}: {_flow(value)}{_comment(provenance.of(key))}")
            continue
        lines.append("variants:")
        for name, variant in value.items():
            lines.append(f"  {name}:{_comment(provenance.of(f'variants.{name}'))}")
            for vkey in VariantSpec.model_fields:
                path = f"variants.{name}.{vkey}"
                if vkey not in variant and vkey in INHERITED:
                    lines.append(f"    # {vkey}: {_flow(job[vkey])}  (default: {INHERITED[vkey]})")
                elif vkey in variant and _shown(vkey, path, provenance):
                    lines.append(f"    {vkey}: {_flow(variant[vkey])}{_comment(provenance.of(path))}")
    return "\n".join(lines) + "\n"
