"""Keys a job file's author indented one level off, told as such.

A variant key dedented to the variants' depth (`cc:` beside `sm90:`) is valid YAML: pydantic
then read a variant named `cc` and said its `build` and `cc` were missing and its `min` unknown,
never the indentation (review 107). Such a name leads the job's errors with the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.config.job_spec import VariantSpec
from orchestrator.errors import ConfigError

VARIANT_KEYS = frozenset(VariantSpec.model_fields)


def misplaced_variant_keys(raw: dict[str, Any], file: Path) -> list[ConfigError]:
    """An error for each variant named like a variant's own key that has no build of its own."""
    variants = raw.get("variants")
    if not isinstance(variants, dict):
        return []
    return [
        ConfigError(
            str(file),
            f"variants.{name}",
            f"a variant named {name!r}, which is a key of a variant",
            f"{name!r} indented under the variant above it, as deep as that variant's `build:` "
            "(or, for a variant of that name, another name)",
        )
        for name, value in variants.items()
        # one with a build of its own is a variant so named (the header's `-arch=native` one is `build`)
        if name in VARIANT_KEYS and not (isinstance(value, dict) and "build" in value)
    ]


def unknown_key_hint(loc: tuple[Any, ...], value: Any) -> str:
    """A job's unknown top-level key holding a variant's keys is a variant outside `variants:`."""
    if len(loc) == 1 and isinstance(value, dict) and "build" in value:
        return f"Is {loc[0]!r} a variant? Indent it under `variants:`."
    return ""
