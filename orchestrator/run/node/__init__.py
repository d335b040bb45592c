"""The node-side runner, in parts: what runs on a node as one program (noderunner.py says how).

It travels to the node on stdin and runs there in one namespace, with the standard library only,
on the node's python3 (3.8 or later). Each part is a module here, one concept each, so that it
reads, lints and is reviewed alone; SOURCE is their text in this order, each part's imports of
the others left out (on the node every name is the one namespace's). A part uses only what the
parts before it define at its top level, as one file would.
"""

from __future__ import annotations

import re
from pathlib import Path

PARTS = (
    "files",
    "farm_folders",
    "ended",
    "readable",
    "spawn",
    "kernel_commands",
    "trampoline",
    "kernel_requests",
    "processes",
    "confine",
    "loads",
    "imports",
    "jit",
    "linked",
    "built",
    "room",
    "drift",
    "driver_version",
    "gpu_lock",
    "sanitizing",
    "stages",
    "stage_flow",
    "probe",
    "place",
    "serve",
)
# a part's import of another part (one line, or parenthesized over several): not shipped
_OWN_IMPORT = re.compile(rb"^from orchestrator\.run\.node\.\w+ import (?:\([^)]*\)|[^\n]*)\n", re.MULTILINE)


def _source() -> bytes:
    folder = Path(__file__).parent
    return b"\n\n".join(_OWN_IMPORT.sub(b"", (folder / f"{part}.py").read_bytes()) for part in PARTS)


SOURCE = _source()
