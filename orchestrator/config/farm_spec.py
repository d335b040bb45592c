"""farm.yaml's shape, as frozen pydantic models: the farm's settings (FarmSpec) and each
machine of its fleet (NodeSpec), with the CUDA toolchains a node's columns build with.

Models only describe and validate; they never open a connection, a file beyond what
validation needs, or a database. farm.py loads farm.yaml into them; a job file's
shape is job_spec.py.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, Strict, ValidationInfo, field_validator, model_validator

from orchestrator.config.capability import ComputeCapability
from orchestrator.config.slurm_options import changes_the_job, farms_own, other_cluster, other_cluster_env
from orchestrator.config.spec_types import WEEK, CCText, Count, StrictModel, check_cc, check_name


class PypiToolchain(StrictModel):
    """A CUDA toolkit the farm installs itself into the node's cache, from NVIDIA's
    wheels on PyPI (run/toolchain.py): no admin rights needed on the node."""

    pypi: str

    @field_validator("pypi")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"\d{1,3}\.\d{1,3}\.\d{1,6}", value):
            raise ValueError('the full version of NVIDIA\'s nvcc wheel, e.g. "13.5.37"')
        if not value.startswith("13."):  # the wheels' layout (nvidia/cu13) and names differ per major
            raise ValueError(f"a CUDA 13 version (found {value}; other majors are not installed this way yet)")
        return value


ToolchainName = Annotated[str, AfterValidator(check_name)]
TOOLCHAIN_SEP = "+"  # a (node, toolchain) column's name: "h200+cuda-13.5"


SLURM_ONLY = ("partition", "gres", "constraint", "time_limit", "pending_limit", "memory", "slurm_options")
SSH_ONLY = ("host", "port", "user", "key_file", "jump", "known_hosts")  # a local node reads none of them


class NodeSpec(StrictModel):
    """One machine of the fleet, as declared. Passive: transports act on it."""

    transport: Literal["ssh", "local", "slurm"] = "ssh"
    host: str | None = None
    port: Count = Field(default=22, ge=1, le=65535)
    user: str | None = None
    key_file: str | None = None
    jump: str | None = None  # "[user@]host[:port]", reached with the same key and known_hosts
    known_hosts: str = "~/.ssh/known_hosts"
    gpu: str | None = None  # declared; the probe's reading wins
    cc: CCText | None = None
    nvcc: Annotated[str, Field(min_length=1)] = "nvcc"  # '' loaded, and every cell was infra-error
    # several CUDA toolkits, each its own column (NODE+NAME): name -> nvcc's path on the node, or
    # {pypi: VERSION}; instead of `nvcc`
    toolchains: dict[ToolchainName, str | PypiToolchain] = Field(default={}, max_length=16)
    toolchain: str | None = None  # set by the farm on each column of `toolchains`, never in farm.yaml
    cuobjdump: Annotated[str, Field(min_length=1)] | None = (
        None  # default: "cuobjdump" on the node, the farm's own locally
    )
    compute_sanitizer: Annotated[str, Field(min_length=1)] | None = (
        None  # default: on the node's PATH, else beside its nvcc
    )
    dependencies: dict[str, str] = {}  # dependency name -> path on the node (not shipped)
    workdir: str = ".cache/farm"  # relative paths are under the login's home
    env: dict[str, str] = {}
    # names in `env` whose values are masked as *** in the output the farm keeps, beside those
    # named like a credential (output_secrets.py)
    secret_env: list[str] = []
    # names in `env` the credential matcher flags that are no secret (a license server's
    # `..._AUTH_HOST`): their values are shown as printed (output_secrets.py)
    plain_env: list[str] = []
    tags: list[str] = []
    enabled: bool = True
    connect_timeout: Annotated[float, Strict(), Field(ge=1, le=600, allow_inf_nan=False)] = 10.0
    build_jobs: Count = Field(default=2, ge=1, le=64)
    gpus: list[int] | None = None  # the GPU indexes (nvidia-smi's) the farm may use; default all
    # who runs a cell's stages on the node: its python3 where it has 3.8 or later (noderunner.py),
    # else POSIX shell. `auto`: one python3 for all of the run's cells on the node (resident.py)
    # where the transport keeps a process running, else one per cell; `cell`: one per cell;
    # `shell` keeps the shell
    runner: Literal["auto", "cell", "shell"] = "auto"
    # transport: slurm -- a partition reached through a login node: the SSH fields
    # above when `host` is set, the farm's own machine when it is not. Every
    # command is a Slurm job (srun) on a compute node; see transport/slurm.py.
    partition: str | None = None
    gres: str | None = None  # a GPU request for each job, e.g. "gpu:1" or "gpu:a100:1"
    constraint: str | None = None  # node features, e.g. "a100&nvlink"
    time_limit: Count | None = Field(default=None, ge=1, le=WEEK // 60)  # minutes per job; default: timeout + 1
    pending_limit: Count = Field(default=300, ge=1, le=WEEK)  # seconds a job may wait for its allocation
    # each job's --mem, e.g. "16G": without it a job gets the partition's DefMemPerCPU, and a
    # build (nvcc with CUTLASS takes GBs) or a kernel over it is killed by Slurm (a red-team finding)
    memory: str | None = Field(default=None, pattern=r"^[1-9][0-9]*[KMGT]?$")
    slurm_options: list[str] = []  # more srun options, one argument each: ["--account=proj", "--qos=debug"]

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        """No NUL in a path, a name or an environment value: no command line, file
        name or environment can carry one (it failed mid-run, the farm's own error)."""
        strings = (
            [value]
            if isinstance(value, str)
            else [*value.keys(), *(v for v in value.values() if isinstance(v, str))]
            if isinstance(value, dict)
            else [v for v in value if isinstance(v, str)]
            if isinstance(value, list)
            else []
        )
        for text in strings:
            if "\0" in text:
                raise ValueError(f"no NUL character (no path, name or environment can carry one; in {text!r})")
        return value

    @field_validator("env")
    @classmethod
    def _slurm_env(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # here, not in _slurm_fields: the error's key path is then nodes.NAME.env (`transport` is
        # validated before `env`, being declared first)
        if info.data.get("transport") == "slurm" and (why := other_cluster_env(value)) is not None:
            raise ValueError(why)
        return value

    @field_validator("cc")
    @classmethod
    def _valid_cc(cls, value: str | None) -> str | None:
        return None if value is None else check_cc(value)

    @field_validator("jump")
    @classmethod
    def _jump_form(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"(?:[A-Za-z0-9_.-]+@)?[A-Za-z0-9_.-]+(?::\d{1,5})?", value):
            raise ValueError("[user@]host[:port], e.g. farm@bastion.example.org:22")
        if value is not None and ":" in value and not 1 <= int(value.rsplit(":", 1)[1]) <= 65535:
            raise ValueError("a port from 1 to 65535 after the ':'")
        return value

    @field_validator("host")
    @classmethod
    def _host_form(cls, value: str | None) -> str | None:
        # any text loaded: "h:2222", "farm@h", "ssh://h" or "[::1]" (ssh_config's habits) left every
        # cell of the node infra-error "could not resolve", run after run (a red-team finding)
        if value is None or re.fullmatch(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?", value):
            return value
        try:
            ipaddress.IPv6Address(value)  # ::1, fe80::1: an address, as ssh's HostName takes it
        except ValueError:
            raise ValueError(
                "a host name or an IP address alone (IPv6 without brackets): the port goes in `port`, "
                "the login in `user`"
            ) from None
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir_form(cls, value: str) -> str:
        # only `~/` is expanded on the node: `~farm/w` made a folder named `~farm` under the login's home
        if value.startswith("~") and not value.startswith("~/"):
            raise ValueError(f"{value!r}: ~/path, an absolute path, or one relative to the login's home (no ~user)")
        return value

    @field_validator("workdir", "nvcc", "cuobjdump", "compute_sanitizer", "key_file", "known_hosts", "dependencies")
    @classmethod
    def _one_line_paths(cls, value: str | dict[str, str] | None) -> str | dict[str, str] | None:
        """A newline (a `workdir: |` block, a paste) split the node's commands at it: a folder made at its
        first line, outside the workdir, and cells infra-error "cannot create .../incoming/..." (round 169)."""
        for path in value.values() if isinstance(value, dict) else [value] if value else []:
            if bad := sorted({c for c in path if ord(c) < 32 or ord(c) == 127}):
                raise ValueError(
                    f"a path with no newline, tab or other control character (found {', '.join(map(repr, bad))} "
                    f"in {path!r})"
                )
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_indexes(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (not value or len(set(value)) != len(value) or min(value) < 0):
            raise ValueError("a list of distinct GPU indexes as nvidia-smi numbers them, e.g. [0, 1]")
        return value

    @field_validator("dependencies")
    @classmethod
    def _known_dependencies(cls, value: dict[str, str]) -> dict[str, str]:
        from orchestrator.config.dependencies import KNOWN

        for name in value:  # a name no job can ask for is a typo, or a copy the farm never uses
            if name not in KNOWN:
                raise ValueError(f"{name!r} is no dependency the farm knows (one of {', '.join(sorted(KNOWN))})")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r} is not an environment variable name")
        return value

    @field_validator("secret_env")
    @classmethod
    def _secret_env_in_env(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # a name that is not in `env` masks nothing: a typo would leave the value it meant published.
        # A field's validator, not the model's: the error then quotes this list, never env's values
        env = info.data.get("env") or {}
        for name in value:
            if name not in env:
                raise ValueError(
                    f"names of this node's `env:` entries ({', '.join(sorted(env)) or 'it has none'}); "
                    f"{name!r} is not one"
                )
        return value

    @field_validator("plain_env")
    @classmethod
    def _plain_env_flagged(cls, value: list[str], info: ValidationInfo) -> list[str]:
        from orchestrator.output_secrets import secret_name

        # each entry must change something: a typo, or a name the matcher never flagged, would
        # read as an exemption while the value it meant stayed masked (or was never at risk)
        env, declared = info.data.get("env") or {}, set(info.data.get("secret_env") or ())
        flagged = sorted(name for name in env if secret_name(name))
        for name in value:
            if name not in env or not secret_name(name) or name in declared:
                why = "also in secret_env" if name in declared else "not one"
                raise ValueError(
                    f"names of this node's `env:` entries read as a credential's "
                    f"({', '.join(flagged) or 'it has none'}), not in secret_env; {name!r} is {why}"
                )
        return value

    @model_validator(mode="after")
    def _one_compiler(self) -> NodeSpec:
        if "toolchain" in self.model_fields_set:
            raise ValueError("`toolchain` is the farm's own (each column of `toolchains` gets it); use `toolchains`")
        if self.toolchains and "nvcc" in self.model_fields_set:
            raise ValueError("either `nvcc` or `toolchains` (each toolchain names its own nvcc), not both")
        return self

    @property
    def pypi_toolchain(self) -> str | None:
        """The wheel version of this column's toolchain, where the farm installs it."""
        chosen = self.toolchains.get(self.toolchain or "")
        return chosen.pypi if isinstance(chosen, PypiToolchain) else None

    def columns(self, name: str) -> dict[str, NodeSpec]:
        """This node as the matrix's columns: itself, or one per toolchain (NODE+NAME),
        each with that toolchain's nvcc (a PyPI one's is found once it is shipped)."""
        if not self.toolchains:
            return {name: self}
        return {
            f"{name}{TOOLCHAIN_SEP}{tc}": self.model_copy(
                update={"toolchain": tc, "toolchains": {tc: value}, "nvcc": value if isinstance(value, str) else "nvcc"}
            )
            for tc, value in self.toolchains.items()
        }

    @model_validator(mode="after")
    def _ssh_needs_host(self) -> NodeSpec:
        if self.transport == "ssh" and not self.host:
            raise ValueError("an ssh node needs `host`")
        given = [key for key in SSH_ONLY if key in self.model_fields_set]
        if self.transport == "local" and given:  # ignored without a word, the node would not be what it says
            raise ValueError(f"{', '.join(given)}: only for `transport: ssh` or `slurm` (this node is local)")
        return self

    @model_validator(mode="after")
    def _slurm_fields(self) -> NodeSpec:
        if self.transport == "slurm":
            if not self.partition:
                raise ValueError("a slurm node needs `partition`")
            for option in self.slurm_options:
                if not option.startswith("-"):
                    raise ValueError(f"slurm_options: {option!r} is not an srun option (expected e.g. --account=NAME)")
                if other_cluster(option):
                    raise ValueError(
                        f"slurm_options: {option!r} sends the jobs to another cluster than the farm's squeue and "
                        "scancel ask: give the node a login node of that cluster, or its SLURM_CONF in `env`"
                    )
                if (own := farms_own(option)) is not None:
                    raise ValueError(
                        f"slurm_options: {option!r} sets {own}, which the farm sets on every job itself "
                        "(partition, time_limit, pending_limit, gres and constraint are keys of the node)"
                    )
                if (why := changes_the_job(option)) is not None:  # red-team 214's note
                    raise ValueError(f"slurm_options: {option!r}: {why}; leave it out")
                # srun refuses --mem beside --mem-per-cpu/-gpu, and a second --mem would make the
                # limit a reason names another than the job had
                if self.memory and re.match(r"--mem(=|$|-per-)", option):
                    raise ValueError(f"slurm_options: {option!r} beside `memory`: give the job's memory once")
            return self
        given = [key for key in SLURM_ONLY if key in self.model_fields_set]
        if given:
            raise ValueError(f"{', '.join(given)}: only for `transport: slurm` (this node is {self.transport})")
        return self

    @property
    def declared_cc(self) -> ComputeCapability | None:
        return None if self.cc is None else ComputeCapability.parse(self.cc)


class FarmSpec(StrictModel):
    database: str = "sqlite:///results.db"
    reports: str = Field(default="reports", min_length=1)  # "" was the farm's folder itself
    jobs: str = Field(default="jobs", min_length=1)  # "" read farm.yaml as a job
    # a *.cu here that no job file lists gets its job from its header (header.py)
    kernels: str = Field(default="kernels", min_length=1)
    # where each run's journal goes (relative to farm.yaml); default beside the database. On another
    # disk, it keeps what a full disk under the database could not take.
    journal: str | None = None
    # the run lock's folder, where the database's has no file locks (NFS without lockd): local, and
    # the same for every farm run of the database (default: beside the database, store/lock.py)
    lock_dir: str | None = None
    journal_keep: Count = Field(default=20, ge=1)  # finished runs' journals kept; older ones deleted (prune)
    max_connections: Count = Field(default=8, ge=1, le=256)  # per sshd: under its default MaxStartups (10)
    # worker processes for the nodes (run/workers.py); auto: one per 16 sshds on a big fleet, none below
    processes: Annotated[int, Strict()] | Literal["auto"] = "auto"
    output_cap: Count = Field(default=1 << 20, ge=1024, le=1 << 30)  # bytes of stdout/stderr/log kept per cell
    retries: Count = Field(default=2, ge=0, le=10)  # extra attempts after an infra failure
    # seconds before the first retry, doubling
    retry_backoff: Annotated[float, Strict(), Field(ge=0, le=3600, allow_inf_nan=False)] = 2.0
    unhealthy_after: Count = Field(default=3, ge=1, le=1000)  # infra failures in a row that retire a node
    # seconds a node that drops mid-run (a reboot) is waited for before its cells are infra-error
    reconnect_window: Annotated[float, Strict(), Field(ge=0, le=86400, allow_inf_nan=False)] = 300.0
    # seconds a run's writes wait for a server database that went away (a restart) before exit 5 (store/outage.py)
    store_wait: Annotated[float, Strict(), Field(ge=0, le=86400, allow_inf_nan=False)] = 120.0
    # a matrix cell older than this is marked stale
    stale_after_days: Annotated[float, Strict(), Field(gt=0, le=36500, allow_inf_nan=False)] = 30.0
    nodes: dict[str, NodeSpec] = Field(min_length=1)

    @field_validator("reports", "jobs", "kernels", "journal", "lock_dir")  # `database`: database_url.check_url
    @classmethod
    def _a_path_a_file_can_have(cls, value: str | None) -> str | None:
        # a NUL, or a `~user` with no home here, was a ValueError or RuntimeError mid-run: "a bug in farm"
        if value is not None and "\0" in value:
            raise ValueError(f"no NUL character (no path can carry one; in {value!r})")
        if value is not None and value.startswith("~"):
            try:
                Path(value).expanduser()
            except RuntimeError:
                raise ValueError(f"{value!r}: a home folder (~user) this machine knows") from None
        return value

    @field_validator("processes")
    @classmethod
    def _processes(cls, value: int | str) -> int | str:
        if value == "auto" or (isinstance(value, int) and 1 <= value <= 256):
            return value
        raise ValueError("auto, or a whole number of worker processes from 1 to 256")
