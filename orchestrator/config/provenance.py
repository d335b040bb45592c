"""Where a job and each of its fields came from: a job file, a kernel's header
(header.py), a course convention, or else the schema's default. Kept key by key as
a job file without `sources` is laid over the job a header describes (`merge`), so
`farm jobs` can print every key with its origin (job_yaml.py).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, ConfigErrors

DEFAULT = "default"  # a key no job file, header or convention sets


@dataclass(frozen=True)
class Provenance:
    """Where a job and each of its fields came from.

    `fields` maps a key path ("pass_marker", "variants.sm80.cc") to its origin:
    "kernels/x.cu:41 Build (needs CC 8.0 to run)", "jobs/x.yaml", or
    CONVENTION (header.py); a key it lacks holds the schema's default."""

    origin: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    def of(self, key: str) -> str:
        return self.fields.get(key, DEFAULT)


@dataclass(frozen=True)
class DerivedJob:
    document: dict[str, Any]  # a job file's document (JobSpec's shape), not yet validated
    provenance: Provenance


def merge(derived: DerivedJob, override: dict[str, Any], label: str, file: Path) -> DerivedJob:
    """A job file without `sources`, laid over the derived job: each top-level key
    it gives replaces the derived one (`headers` adds to the included ones); under `variants`, a variant the header
    also builds (by its derived name) is merged key by key, and any other must
    be a whole variant."""
    document = dict(derived.document)
    fields = dict(derived.provenance.fields)
    errors: list[ConfigError] = []
    for key, value in override.items():
        if key == "variants" and isinstance(value, dict):
            variants = dict(document["variants"])
            for name, given in value.items():
                if name in variants and isinstance(given, dict):
                    variants[name] = {**variants[name], **given}
                    fields |= {f"variants.{name}.{k}": label for k in given}
                    continue
                if isinstance(given, dict) and "build" not in given:
                    close = difflib.get_close_matches(str(name), list(variants), n=1)
                    errors.append(
                        ConfigError(
                            str(file),
                            f"variants.{name}",
                            f"a variant without `build` that the header of {derived.document['sources'][0]} "
                            f"does not build (it builds {', '.join(variants)})",
                            "one of the header's variants, to change some of its keys, or a whole variant "
                            "with build and cc",
                            f"Did you mean {close[0]!r}?" if close else "",
                        )
                    )
                    continue
                variants[name] = given
                fields = {k: v for k, v in fields.items() if not k.startswith(f"variants.{name}.")}
                fields[f"variants.{name}"] = label
                if isinstance(given, dict):
                    fields |= {f"variants.{name}.{k}": label for k in given}
            document["variants"] = variants
            continue
        if key == "headers" and isinstance(value, list) and document.get("headers"):
            # what the source includes stays shipped: a job file adding a data file dropped
            # the derived includes, and the build failed on the node (round 53)
            # (one the job file lists itself, or a folder of, is its own: listed once)
            given = [str(v).rstrip("/") for v in value]
            kept = [h for h in document["headers"] if not any(h == g or h.startswith(g + "/") for g in given)]
            document[key] = [*kept, *value]
            fields[key] = f"{fields[key]}; {label}"
            continue
        document[key] = value
        fields = {k: v for k, v in fields.items() if not k.startswith(f"{key}.")}
        fields[key] = label
    if errors:
        raise ConfigErrors(errors)
    origin = f"{derived.provenance.origin}, with {label} over it"
    return DerivedJob(document, Provenance(origin, fields))


def file_provenance(document: Any, label: str) -> Provenance:
    """A whole job file: every key it gives is its own."""
    fields: dict[str, str] = {}
    if isinstance(document, dict):
        fields = {str(key): label for key in document}
        variants = document.get("variants")
        if isinstance(variants, dict):
            for name, variant in variants.items():
                fields[f"variants.{name}"] = label
                if isinstance(variant, dict):
                    fields |= {f"variants.{name}.{key}": label for key in variant}
    return Provenance(f"{label} (a whole job: it lists sources, so no header is read)", fields)
