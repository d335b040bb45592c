"""The environment a `local` node's commands start with: the farm's own, less its credentials.

A node reached over SSH starts its commands with its login's environment; the `local` node had
the farm process's, whole: the run's FARM_DATABASE (the results database's password in it),
libpq's PGPASSWORD, a CI's tokens (GITHUB_TOKEN, CI_JOB_TOKEN, AWS_SECRET_ACCESS_KEY) and the
operator's SSH agent, which logs into every node of the fleet. Every kernel and build of the node
got them, and a kernel that printed its environment put them on its cell's page, in results.db and
in the run's journal (red-team round 99). They are the farm's, not the node's: none is needed to
build or run a kernel, and one that is goes in the node's `env:` in farm.yaml, exported by each
command from its stdin (transport/base.py), which this leaves alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# the farm's own credentials, by name: its database URL (settings: cli/base.py), libpq's password
# for it, and the agent that holds the keys of the fleet's nodes
_FARM_OWN = frozenset({"FARM_DATABASE", "PGPASSWORD", "SSH_AUTH_SOCK"})
# names that say what their value is: a token (a CI's signed JWT: CI_JOB_JWT), a secret, a password,
# a private or an API key, or a registry's login (an AUTH part: DOCKER_AUTH_CONFIG, NPM_CONFIG__AUTH;
# red-team 135), not a name merely holding those letters (XAUTHORITY, AUTHOR)
_CREDENTIAL_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|JWT|(^|_)AUTH(_|$)",
    re.IGNORECASE,
)
# a value holding a URL with a password (DATABASE_URL, a package index's URL): scheme://user:pass@
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")


def is_credential(name: str, value: str) -> bool:
    """Whether the variable `name`=`value` of the farm's environment is a credential of its own."""
    return name in _FARM_OWN or bool(_CREDENTIAL_NAME.search(name) or _URL_PASSWORD.search(value))


def node_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` (the farm's) less every credential in it: what a local node's commands start with."""
    return {name: value for name, value in environ.items() if not is_credential(name, value)}
