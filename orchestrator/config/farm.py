"""Loading farm.yaml and jobs/*.yaml into validated, frozen objects.

Everything that can be wrong with the configuration is found here, before any
connection or database is opened, and reported as ConfigErrors naming the file,
the key path, what was found and what was expected (with a did-you-mean for
unknown keys). Loading has no side effects.

Precedence for the settings a user may override: CLI flag > environment
(FARM_CONFIG, FARM_DATABASE) > farm.yaml > default. The CLI applies the first
two and passes overrides in; this module knows only the file and the defaults.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config import command_templates, dependencies, header, input_paths, output_paths, own_files
from orchestrator.config.database_url import resolve_database
from orchestrator.config.header import Provenance
from orchestrator.config.schema import (
    NAME_EXPECTED,
    NAME_RE,
    TOOLCHAIN_SEP,
    FarmSpec,
    JobSpec,
    NodeSpec,
)
from orchestrator.config.validation import validate
from orchestrator.config.yaml_file import read_yaml
from orchestrator.errors import ConfigError, ConfigErrors

COLUMN_MAX = 64  # results.node and node_snapshots.node are String(64): PostgreSQL enforces it


@dataclass(frozen=True)
class Job:
    """A kernel's job, validated, with its inputs resolved on disk: from its job
    file, or derived from its source's header (`file` is then the source, or
    the job file laid over it; see header.py).

    `files` is everything shipped in the kernel's sources bundle: the
    translation units (`sources`, passed to nvcc) and every file of `headers`
    (shipped and hashed, never passed to nvcc), by path relative to the
    project folder. Their sha256 values, with the dependencies' digests, make
    the certificate identity (inputs.py)."""

    spec: JobSpec
    file: Path
    files: dict[str, Path]  # relative path -> absolute path, sorted by path
    file_sha256: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    # where the job and each field came from: a job file, a kernel's header (header.py), a default
    provenance: Provenance = field(default_factory=Provenance)

    @property
    def kernel(self) -> str:
        return self.spec.kernel

    @property
    def main_source(self) -> str:
        """The first translation unit: the file whose header holds the course's claims."""
        return self.spec.sources[0]


@dataclass(frozen=True)
class Farm:
    """The whole configuration: where it came from, the fleet and the jobs."""

    file: Path
    spec: FarmSpec
    jobs: dict[str, Job]
    database_url: str

    @property
    def root(self) -> Path:
        return self.file.parent

    @property
    def nodes(self) -> dict[str, NodeSpec]:
        return self.spec.nodes

    @property
    def enabled_nodes(self) -> dict[str, NodeSpec]:
        return {name: node for name, node in self.spec.nodes.items() if node.enabled}

    @property
    def reports_dir(self) -> Path:
        # `~/site` is the user's home, as `journal` and a local node's `workdir` read it (a literal
        # ./~/site took the reviewers' site elsewhere unsaid: a red-team finding)
        return (self.root / Path(self.spec.reports).expanduser()).resolve()

    @property
    def configured_database_url(self) -> str:
        """farm.yaml's own `database`, resolved as database_url is (which --database or
        FARM_DATABASE may have replaced)."""
        return resolve_database(self.spec.database, self.root)

    @property
    def source_folders(self) -> dict[str, Path]:
        """The folders of the course's own files, by farm.yaml's key: no report goes there."""
        return {key: (self.root / getattr(self.spec, key)).resolve() for key in ("jobs", "kernels")}


def _check_names(raw: dict[str, Any], section: str, file: Path) -> list[ConfigError]:
    errors = []
    mapping = raw.get(section)
    if isinstance(mapping, dict):
        for name in mapping:
            if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
                errors.append(ConfigError(str(file), f"{section}.{name}", f"the name {name!r}", NAME_EXPECTED))
    return errors


# ------------------------------------------------------------------- loading


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _label(path: Path, root: Path) -> str:
    """A path as provenance shows it: relative to the project folder."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def load_job(file: Path, root: Path, nodes: dict[str, NodeSpec], *, check_dependencies: bool = True) -> Job:
    raw = read_yaml(file, "a job file")
    return _job(raw, file, root, nodes, check_dependencies, header.file_provenance(raw, _label(file, root)))


def _derived_job(
    source: Path,
    override: tuple[Path, dict[str, Any]] | None,
    root: Path,
    nodes: dict[str, NodeSpec],
    check_dependencies: bool,
) -> Job:
    """A kernel's job from its header, with its job file (one without `sources`) laid over it."""
    if source.is_symlink():  # a certificate is about the kernel's own bytes, never a link's target
        raise ConfigError(str(source), "", "a symbolic link", "a regular file in the kernels folder")
    derived = header.derive_job(source, _label(source, root))
    blame = source
    if override is not None:
        blame, raw = override
        derived = header.merge(derived, raw, _label(blame, root), blame)
    return _job(derived.document, blame, root, nodes, check_dependencies, derived.provenance)


def _job(
    raw: Any, file: Path, root: Path, nodes: dict[str, NodeSpec], check_dependencies: bool, provenance: Provenance
) -> Job:
    errors = _check_names(raw, "variants", file) if isinstance(raw, dict) else []
    try:
        spec: JobSpec = validate(JobSpec, raw, file, "a job: kernel, sources, variants, ...")
    except ConfigErrors as many:
        raise ConfigErrors(errors + many.errors) from None
    errors += command_templates.check_templates(spec, file)
    if spec.kernel != file.stem:
        errors.append(
            ConfigError(
                str(file),
                "kernel",
                repr(spec.kernel),
                f"the file's own name, {file.stem!r}, so each kernel has one job file",
            )
        )
    files: dict[str, Path] = {}
    for key, listed in [("sources", spec.sources), ("headers", spec.headers)]:
        for index, entry in enumerate(listed):
            found, expected = input_paths.input_problem(entry, root, folder_ok=key == "headers")
            if found:
                errors.append(ConfigError(str(file), f"{key}[{index}]", found, expected))
                continue
            for rel, path in input_paths.found_files(entry, root):
                if rel in files:
                    errors.append(
                        ConfigError(
                            str(file),
                            f"{key}[{index}]",
                            f"{rel!r} a second time",
                            "each source and header once (a file listed twice would be compiled twice)",
                        )
                    )
                files[rel] = path
    for index, dep in enumerate(spec.dependencies):
        if dep not in dependencies.KNOWN:
            errors.append(
                ConfigError(
                    str(file),
                    f"dependencies[{index}]",
                    repr(dep),
                    "one of " + ", ".join(sorted(dependencies.KNOWN)),
                )
            )
            continue
        needs_local = [n for n, node in nodes.items() if node.enabled and dep not in node.dependencies]
        if check_dependencies and needs_local and dependencies.local_path(dep) is None:
            errors.append(
                ConfigError(
                    str(file),
                    f"dependencies[{index}]",
                    f"{dep!r}, which is not installed on this machine",
                    f"it installed ({dependencies.install_hint(dep)}) or named by every "
                    f"enabled node under dependencies.{dep} (missing on: {', '.join(needs_local)})",
                )
            )
    if errors:
        raise ConfigErrors(errors)
    ordered = dict(sorted(files.items()))
    return Job(
        spec=spec,
        file=file,
        files=ordered,
        file_sha256={rel: _sha256(p) for rel, p in ordered.items()},
        provenance=provenance,
    )


def _load_jobs(
    spec: FarmSpec, project: Path, job_files: list[Path], kernels: list[Path], check_dependencies: bool
) -> tuple[dict[str, Job], list[ConfigError]]:
    """Every kernel's job, and every error found on the way.

    A job file that lists `sources` is a whole job, as it always was, and no
    header is read. A kernel source no job file lists gets the job its header
    describes (header.py), with the job file of its name, one without
    `sources`, laid over it field by field."""
    errors: list[ConfigError] = []
    raws: dict[Path, Any] = {}
    for job_file in job_files:
        try:
            raws[job_file] = read_yaml(job_file, "a job file")
        except ConfigError as one:
            errors.append(one)
    makers: list[tuple[Path, Callable[[], Job]]] = []
    overrides: dict[str, tuple[Path, dict[str, Any]]] = {}
    whole: dict[str, Path] = {}
    for job_file, raw in raws.items():
        if isinstance(raw, dict) and "sources" not in raw and job_file.stem not in overrides:
            overrides[job_file.stem] = (job_file, raw)
            continue
        whole.setdefault(job_file.stem, job_file)
        provenance = header.file_provenance(raw, _label(job_file, project))
        makers.append(
            (job_file, functools.partial(_job, raw, job_file, project, spec.nodes, check_dependencies, provenance))
        )
    listed = [entry for raw in raws.values() for entry in _listed(raw)]
    for source in kernels:
        rel = _label(source, project)
        override = overrides.pop(source.stem, None)
        if override is None and any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in listed):
            continue  # a file of a job file's kernel
        if override is None and source.stem in whole:
            errors.append(
                ConfigError(
                    str(source),
                    "",
                    f"a kernel no job file lists, whose name {whole[source.stem]} already takes",
                    "it listed under that job's sources or headers, or another file name",
                )
            )
            continue
        makers.append(
            (source, functools.partial(_derived_job, source, override, project, spec.nodes, check_dependencies))
        )
    for stem, (job_file, _) in overrides.items():
        errors.append(
            ConfigError(
                str(job_file),
                "sources",
                f"nothing, and no {spec.kernels}/{stem}.cu whose header gives the rest of the job",
                f"the kernel's translation units (a whole job), or {spec.kernels}/{stem}.cu with a Build: line",
            )
        )
    jobs: dict[str, Job] = {}
    for job_file, make in makers:
        try:
            job = make()
        except ConfigErrors as many:
            errors.extend(many.errors)
            continue
        except ConfigError as one:
            errors.append(one)
            continue
        if job.kernel in jobs:
            errors.append(
                ConfigError(
                    str(job_file),
                    "kernel",
                    repr(job.kernel),
                    f"a kernel name not already used by {jobs[job.kernel].file}",
                )
            )
        jobs[job.kernel] = job
    return jobs, errors


def _kernel_sources(file: Path, spec: FarmSpec, project: Path) -> list[Path]:
    """The kernels/*.cu files (farm.yaml's `kernels`), each a job unless a job file lists it."""
    folder = (file.parent / spec.kernels).resolve()
    if not folder.is_dir():
        if "kernels" in spec.model_fields_set:
            raise ConfigError(str(file), "kernels", f"{spec.kernels!r}, which is not a folder", "the kernels' folder")
        return []
    if not folder.is_relative_to(project):
        raise ConfigError(
            str(file),
            "kernels",
            f"{spec.kernels!r}, outside {project}",
            f"a folder inside {project}, the folder that holds the jobs (sources are relative to it)",
        )
    return sorted(p for p in folder.glob("*.cu") if p.is_file() or p.is_symlink())


def _listed(raw: Any) -> list[str]:
    """What a job file lists under sources and headers, as written (read before validation)."""
    if not isinstance(raw, dict):
        return []
    entries = [raw.get("sources"), raw.get("headers")]
    return [e for listed in entries if isinstance(listed, list) for e in listed if isinstance(e, str)]


def load_farm(file: Path | str, *, database: str | None = None, check_dependencies: bool = True) -> Farm:
    """Load and validate farm.yaml and every job it points at.

    `check_dependencies=False` is for commands that only read the database
    (show, report): they need no CUTLASS installed to print a stored cell."""
    file = Path(file).resolve()
    raw = read_yaml(file, "the farm's configuration (farm.yaml)")
    errors = _check_names(raw, "nodes", file) if isinstance(raw, dict) else []
    if isinstance(raw, dict) and not raw.get("nodes"):
        raise ConfigError(str(file), "nodes", "no nodes", "at least one node under `nodes:`")
    try:
        spec: FarmSpec = validate(FarmSpec, raw, file, "the farm: nodes, database, jobs, reports")
    except ConfigErrors as many:
        raise ConfigErrors(errors + many.errors) from None
    if errors:
        raise ConfigErrors(errors)
    root = file.parent
    jobs_dir = (root / spec.jobs).resolve()
    sources = {"jobs": jobs_dir, "kernels": (root / spec.kernels).resolve()}
    if problem := output_paths.site_folder_problem(root / Path(spec.reports).expanduser(), sources):
        raise ConfigError(str(file), "reports", *problem)
    project = jobs_dir.parent  # sources are relative to the folder that holds jobs/ (and kernels/)
    kernels = _kernel_sources(file, spec, project)
    # without a jobs folder (farm.yaml not naming one), the kernels' headers may give every job
    job_files: list[Path] = []
    if jobs_dir.is_dir():
        try:
            job_files = sorted(jobs_dir.glob("*.yaml")) + sorted(jobs_dir.glob("*.yml"))
            listed = sorted(jobs_dir.iterdir())
        except OSError as err:  # a folder this user may not list was "a bug in farm" (a red-team finding)
            found = f"{spec.jobs!r}, which cannot be read ({err.strerror})"
            raise ConfigError(str(file), "jobs", found, "a folder this user may read") from err
        # `saxpy.YAML` or `saxpy.yaml.txt` looks like a job but was skipped, and the header's job
        # ran in its place without the author's requirements (found by a red-team helper)
        unread = [
            f
            for f in listed
            if f not in job_files
            and f.is_file()  # a folder `old.yaml.d/` is no job file
            and not f.name.startswith(".")
            and re.search(r"\.ya?ml(\.|$)", f.name, re.IGNORECASE)
        ]
        if unread:
            raise ConfigErrors(
                [
                    ConfigError(
                        str(f),
                        "",
                        "a job file's name the farm does not read",
                        f"KERNEL.yaml or KERNEL.yml, in lower case ({f.name.split('.')[0]}.yaml)",
                    )
                    for f in unread
                ]
            )
        no_jobs = ConfigError(
            str(file),
            "jobs",
            f"no *.yaml files in {jobs_dir}",
            f"one job file per kernel, or kernels in {spec.kernels}/ whose headers have Build: lines",
        )
    else:
        no_jobs = ConfigError(
            str(file), "jobs", f"{spec.jobs!r}, which is not a folder", "a folder of job files (one YAML per kernel)"
        )
        if "jobs" in spec.model_fields_set or not kernels:
            raise no_jobs
    if not job_files and not kernels:
        raise no_jobs
    jobs, errors = _load_jobs(spec, project, job_files, kernels, check_dependencies)
    if not jobs and not job_files and all(e.key == "Build" for e in errors):
        errors.insert(0, no_jobs)  # no job file and no header with a Build line: no jobs at all, say so first
    url = resolve_database(database or spec.database, root)
    own = own_files.own_files(file, spec, [url, resolve_database(spec.database, root)])
    errors += own_files.shipped(jobs, own)
    if errors:
        raise ConfigErrors(errors)
    # a node with several toolchains is several columns, each planned, probed and stored as a node
    columns = {col: one for name, node in spec.nodes.items() for col, one in node.columns(name).items()}
    too_long = [
        ConfigError(
            str(file),
            f"nodes.{col.split(TOOLCHAIN_SEP)[0]}.toolchains.{col.split(TOOLCHAIN_SEP, 1)[1]}",
            f"the column name {col!r} ({len(col)} characters)",
            f"NODE{TOOLCHAIN_SEP}TOOLCHAIN of at most {COLUMN_MAX} characters (the store keeps a node's name in 64)",
        )
        for col in columns
        if len(col) > COLUMN_MAX
    ]
    if too_long:
        raise ConfigErrors(too_long)
    if columns.keys() != spec.nodes.keys():
        spec = spec.model_copy(update={"nodes": columns})
    return Farm(file=file, spec=spec, jobs=jobs, database_url=url)
