"""A variant's command templates (`build`, `run`, `inspect`) checked at load: the {fields}
each may name, and each stage's own rule (stage_commands.py, run_command.py). The farm
fills the fields on the way to the node, so a field its stage does not fill, or one with
a conversion or format spec (template_fields says why), is a ConfigError now, not a
failure there."""

from __future__ import annotations

import difflib
import string
from pathlib import Path

from orchestrator.config import run_command, stage_commands
from orchestrator.config.job_spec import JobSpec
from orchestrator.errors import ConfigError

# Fields a template may name; each dependency a job declares adds its own name.
BUILD_FIELDS = frozenset({"nvcc", "sources", "binary"})
RUN_FIELDS = frozenset({"binary"})
INSPECT_FIELDS = frozenset({"cuobjdump", "binary"})


def template_fields(template: str) -> list[str]:
    """The {fields} a command template names. Only plain `{name}` fields are
    allowed: a conversion (`{sources!r}`) would undo the farm's shell quoting
    and a format spec could pad a field to gigabytes; both raise ValueError."""
    fields = []
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if conversion or spec or not field.isidentifier():
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"the field {shown}: only plain {{name}} fields are allowed")
        fields.append(field)
    return fields


def check_templates(job: JobSpec, file: Path) -> list[ConfigError]:
    errors = []
    dep_fields = set(job.dependencies)
    for vname, variant in job.variants.items():
        for key, template, allowed in (
            ("build", variant.build, BUILD_FIELDS | dep_fields),
            ("run", variant.run, RUN_FIELDS),
            ("inspect", variant.inspect, INSPECT_FIELDS),
        ):
            try:
                names = template_fields(template)
            except ValueError as err:
                errors.append(
                    ConfigError(
                        str(file),
                        f"variants.{vname}.{key}",
                        f"{template!r} ({err})",
                        "a command template of plain {name} fields with balanced braces",
                    )
                )
                continue
            for name in names:
                if name not in allowed:
                    close = difflib.get_close_matches(name, sorted(allowed), n=1)
                    errors.append(
                        ConfigError(
                            str(file),
                            f"variants.{vname}.{key}",
                            f"the unknown template field {{{name}}}",
                            "one of " + ", ".join("{" + a + "}" for a in sorted(allowed)),
                            f"Did you mean {{{close[0]}}}?" if close else "",
                        )
                    )
        if error := run_command.check_run(job, vname, variant.run, file):
            errors.append(error)
        if error := stage_commands.check_build(vname, variant.build, file):
            errors.append(error)
        if error := stage_commands.check_inspect(vname, variant.inspect, bool(variant.instructions), file):
            errors.append(error)
    return errors
