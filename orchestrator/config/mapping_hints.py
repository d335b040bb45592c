"""What a key that holds a mapping looks like, for a newcomer who wrote a scalar or a list
there: pydantic said "a valid dictionary or instance of ContractSpec", a Python class's name
and nothing of how to write the key (a review finding, round 95)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# by the key's own name, the last one of its path; each as the README's job file writes it
EXAMPLES = {
    "cc": '{min: "7.5"}, {exactly: "9.0"} or {min: "7.5", max: "8.9"} (the card\'s CC, not a build target)',
    "variants": "sm80: {build: '...', cc: {min: \"8.0\"}}, a variant's name over its keys",
    "instructions": "{HMMA: 1}, each SASS opcode over the least count of it",
    "when": '{nvcc: ">=13.0,<13.1"} and/or cc: {min: "9.0"}',
    "metrics": "run: {unit: s, better: lower, tolerance: 0.5}, a metric's name over its keys",
    "nodes": "local: {transport: local}, a node's name over its keys",
}


def mapping_expected(loc: tuple[Any, ...], holder: type[BaseModel] | None) -> str:
    """'a mapping ...' for the key at `loc`: the keys its model takes, and an example where one is known."""
    names = [str(item) for item in loc if not isinstance(item, int)]
    example = EXAMPLES.get(names[-1] if names else "")
    if holder is not None:
        required = [n for n, f in holder.model_fields.items() if f.is_required()]
        keys = ", ".join(holder.model_fields)
        must = f" ({', '.join(required)} required)" if required else ""
        text = f"a mapping of its keys ({keys}){must}"
        if example is None and "build" in holder.model_fields:  # a variant written as its build line
            example = "build: '{nvcc} -arch=sm_80 -o {binary} {sources}' and cc: {min: \"8.0\"} beneath it"
    else:
        text = "a mapping (key: value), not a single value or a list"
    return f"{text}, e.g. {example}" if example else text
