"""The parts both shapes of the configuration, farm.yaml's (farm_spec.py) and a job
file's (job_spec.py), are made of: names safe in paths and command lines, compute
capabilities as written, seconds and counts a run can honour, and the strict, frozen
model every shape is (an unknown key is refused, never ignored).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from orchestrator.config.capability import ComputeCapability

# Names end up in paths and remote command lines; keep them to a safe alphabet
# so that quoting is a second line of defence, not the only one.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # always fullmatch: "$" admits a trailing newline
# its first character said too: `-x` was refused with '-' listed as allowed (a name never starts with
# one: a command line would read it as an option; review 208)
NAME_EXPECTED = (
    "a name of letters, digits, '_', '.' and '-', starting with a letter or digit (at most 64, no '..', spaces or '/')"
)


def check_name(value: str) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or ".." in value:
        raise ValueError(f"expected {NAME_EXPECTED}")
    return value


def _cc_text(value: object) -> object:
    # YAML reads an unquoted 7.5 as a float; accept it, but never an int such as 9, nor a float
    # that rounding would change (8.96 read as 9.0: a red-team finding)
    if isinstance(value, float):  # as written: `8.10` is the float 8.1 (yaml_file.WrittenFloat)
        text = getattr(value, "written", repr(value))
        return text if re.fullmatch(r"[0-9]+\.[0-9]", text) else f"{text} (unquoted)"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def check_cc(value: str) -> str:
    if value != value.strip():
        raise ValueError(f"{value.strip()!r}, with no blanks around it")
    ComputeCapability.parse(value)
    return value


CCText = Annotated[str, BeforeValidator(_cc_text)]

# Numbers are finite, of the right type (`port: true` is not port 1) and within
# bounds a run can honour: a timeout of 0.4 s would become `timeout 0`, i.e. none.
WEEK = 7 * 24 * 3600
Seconds = Annotated[float, Strict(), Field(ge=1, le=WEEK, allow_inf_nan=False)]
Count = Annotated[int, Strict()]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
