"""The README's yaml examples, as tests that run them read them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_yaml(heading: str) -> Any:
    """The first ```yaml block of the README's section `## HEADING`, parsed."""
    text = README.read_text()
    assert f"\n## {heading}\n" in text, f"the README has no section {heading!r}"
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, f"the README's section {heading!r} has no yaml example"
    return yaml.safe_load(block.group(1))
