"""The environment a `local` node's commands start with: a login's, taken from the farm's own.

A node reached over SSH starts its commands with its login's environment; the `local` node had
the farm process's, whole: the run's FARM_DATABASE (the results database's password in it),
libpq's PGPASSWORD, a CI's tokens (GITHUB_TOKEN, CI_JOB_TOKEN, AWS_SECRET_ACCESS_KEY) and the
operator's SSH agent, which logs into every node of the fleet (red-team round 99). A denylist of
credential names then missed whatever a CI or an operator names otherwise: SENTRY_DSN, a webhook's
URL (SLACK_WEBHOOK_URL), a license server's string (red-team 135, review 139). The node now gets
only what a login has and a build or a CUDA program reads (LOGIN, LOGIN_PREFIXES), as an SSH node
does, and of those none named or valued like a credential (is_credential: a URL with a password in
LD_LIBRARY_PATH still goes). Anything else a kernel needs goes in the node's `env:` in farm.yaml,
exported by each command from its stdin (transport/base.py), which this leaves alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# what sshd and login(1) give a session, and what finding programs and libraries needs:
# - PATH: every tool (nvcc, g++, python3, nvidia-smi; a test's stand-ins) is found through it
# - HOME, USER, LOGNAME, SHELL: who the session is and where its files are (~ in a workdir, caches)
# - LANG, LANGUAGE, TZ, TERM: a login's locale, time zone and terminal, as sshd passes them
# - TMPDIR: where nvcc and gcc write their temporaries (a site whose /tmp is small moves it)
# - LD_LIBRARY_PATH: where CUDA's runtime and a toolkit's libraries are found (`module load cuda`)
# - SLURM_CONF: the cluster a Slurm node's local login reaches (a path a cluster's profile sets);
#   without it srun and squeue read the machine's default slurm.conf, maybe another cluster's. No
#   other SLURM_*: in a farm started inside a job, SLURM_JOB_ID would make each srun a step of it
LOGIN = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR"}
    | {"LD_LIBRARY_PATH", "SLURM_CONF"}
)
# - LC_*: the locale's parts (LC_ALL, LC_CTYPE), as LANG
# - CUDA_*: the toolkit's place (CUDA_HOME, CUDA_PATH) and the driver's and runtime's settings
#   (CUDA_CACHE_PATH, CUDA_MODULE_LOADING, CUDA_MPS_PIPE_DIRECTORY): too many to name one by one
# - NVIDIA_*: what an nvidia/cuda container sets for everything in it (NVIDIA_DRIVER_CAPABILITIES,
#   NVIDIA_TF32_OVERRIDE, read by NVIDIA's libraries)
LOGIN_PREFIXES = ("LC_", "CUDA_", "NVIDIA_")
# not the farm's card: it pins each cell to its own (CUDA_VISIBLE_DEVICES=UUID, stages/run.py) from
# the node's `gpus:`, and a Slurm job gets its card from Slurm; the farm's own pin is no login's.
# Left out too, though a build reads them (NVCC_*, CC, CXX, CPATH, LIBRARY_PATH, CUDAHOSTCXX),
# PYTHONPATH and LD_PRELOAD: they change what a build makes or what the runner's python3 imports,
# and belong in farm.yaml's `env:` where they are the same whoever starts the farm
NOT_LOGIN = frozenset({"CUDA_VISIBLE_DEVICES"})

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


def is_login(name: str) -> bool:
    """Whether a login would have the variable `name` (LOGIN, LOGIN_PREFIXES less NOT_LOGIN)."""
    return name not in NOT_LOGIN and (name in LOGIN or name.startswith(LOGIN_PREFIXES))


def node_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What a local node's commands start with: `environ`'s (the farm's) login variables, no credential."""
    return {name: value for name, value in environ.items() if is_login(name) and not is_credential(name, value)}


def not_passed(environ: Mapping[str, str], declared: Mapping[str, str]) -> list[str]:
    """The names of `environ`'s (the farm's) variables a local node's commands do not get, less those
    the node's `env:` declares: what `farm nodes` tells an operator whose kernel misses one."""
    passed = node_environment(environ)
    return sorted(name for name in environ if name not in passed and name not in declared)
