"""A node's SSH files (`key_file`, `known_hosts`) under `~/`, where the farm has no home.

The default `known_hosts: ~/.ssh/known_hosts` is expanded on the farm's machine. Under a uid the
password database lacks and no HOME (`env -i`, a container's `--user 54321`), Python cannot expand
it: every cell of an SSH node was "internal error in the farm (RuntimeError: Could not determine
home directory.)" and the run exit 70, a bug in farm (red-team 121). Now the node is unusable,
saying which key to give as an absolute path."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.errors import NodeUnusable


def expanded(value: str, node: str, key: str) -> str:
    """`value` with its `~` expanded; NodeUnusable naming the node and `key` where there is no home."""
    try:
        return str(Path(value).expanduser())
    except RuntimeError:
        # `~bob/...`: Python says the same of a user this machine lacks, where the farm's own home is
        # fine; "no HOME, and uid 0 has no entry" sent its operator after the wrong cause (review 124)
        if user := value[1:].split("/", 1)[0]:
            raise NodeUnusable(
                f"node {node!r}: its {key} {value!r} is under the home of {user!r}, a user this machine's "
                f"password database lacks: give the node's `{key}` in farm.yaml as an absolute path"
            ) from None
        raise NodeUnusable(
            f"node {node!r}: its {key} {value!r} is under the farm's home, and it has none (no HOME, and uid "
            f"{os.getuid()} has no entry in the password database): give the node's `{key}` in farm.yaml "
            "as an absolute path, or set HOME"
        ) from None
