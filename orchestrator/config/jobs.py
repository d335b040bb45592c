"""A kernel's job, loaded and validated: from a job file that lists its `sources` (a whole
job), or from the kernel's header (header.py) with the job file of its name laid over it.
Every job's errors are found in one pass, and each job's files are hashed on the way for
its certificate identity (inputs.py)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config import command_templates, dependencies, header, input_paths
from orchestrator.config.farm_spec import FarmSpec, NodeSpec
from orchestrator.config.includes import unshipped_include_errors
from orchestrator.config.job_spec import JobSpec
from orchestrator.config.misplaced import misplaced_variant_keys
from orchestrator.config.provenance import Provenance, file_provenance, merge
from orchestrator.config.run_files import build_file_errors, run_file_errors
from orchestrator.config.validation import check_names, validate
from orchestrator.config.yaml_file import read_yaml
from orchestrator.errors import ConfigError, ConfigErrors


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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _label(path: Path, root: Path) -> str:
    """A path as provenance shows it: relative to the project folder."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def load_job(file: Path, root: Path, nodes: dict[str, NodeSpec], *, check_dependencies: bool = True) -> Job:
    raw = read_yaml(file, "a job file")
    return _job(raw, file, root, nodes, check_dependencies, file_provenance(raw, _label(file, root)))


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
    # the job comes from one read of the header, the identity from another: an edit saved between
    # them certified bytes under a Build: line and contract they do not say (red-team round 156)
    before = _sha256(source)
    derived = header.derive_job(source, _label(source, root), root)
    blame = source
    if override is not None:
        blame, raw = override
        derived = merge(derived, raw, _label(blame, root), blame)
    job = _job(derived.document, blame, root, nodes, check_dependencies, derived.provenance)
    if job.file_sha256.get(_label(source, root)) != before:
        raise ConfigError(
            str(source),
            "",
            "a file that changed while the farm read it (its header and its bytes were of two versions)",
            "it left as it is while the farm loads: run again once it is saved",
        )
    return job


def _job(
    raw: Any, file: Path, root: Path, nodes: dict[str, NodeSpec], check_dependencies: bool, provenance: Provenance
) -> Job:
    errors = misplaced_variant_keys(raw, file) + check_names(raw, "variants", file) if isinstance(raw, dict) else []
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
            found, expected = input_paths.input_problem(
                entry, root, folder_ok=key == "headers", listed=[*spec.sources, *spec.headers]
            )
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
    if not errors:
        errors += unshipped_include_errors(spec.sources, file, root, files)
        errors += run_file_errors(spec, file, files, provenance)
        errors += build_file_errors(spec, file, files)
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


def load_jobs(
    spec: FarmSpec, project: Path, job_files: list[Path], kernels: list[Path], check_dependencies: bool
) -> tuple[dict[str, Job], list[ConfigError]]:
    """Every kernel's job, and every error found on the way.

    A job file that lists `sources` is a whole job, as it always was, and no
    header is read. A kernel source no job file lists gets the job its header
    describes (header.py), with the job file of its name, one without
    `sources`, laid over it field by field."""
    errors: list[ConfigError] = []
    doubled = _doubled(job_files, errors)
    raws: dict[Path, Any] = {}
    for job_file in job_files:
        if job_file.stem in doubled:  # its one error says so; neither file nor its header is read
            continue
        try:
            raws[job_file] = read_yaml(job_file, "a job file")
        except ConfigError as one:
            errors.append(one)
    # a kernel whose job file YAML could not read has a job file: its header is not its job
    unread = {job_file.stem for job_file in job_files if job_file not in raws}
    makers: list[tuple[Path, Callable[[], Job]]] = []
    overrides: dict[str, tuple[Path, dict[str, Any]]] = {}
    whole: dict[str, Path] = {}
    for job_file, raw in raws.items():
        if isinstance(raw, dict) and "sources" not in raw and job_file.stem not in overrides:
            overrides[job_file.stem] = (job_file, raw)
            continue
        whole.setdefault(job_file.stem, job_file)
        provenance = file_provenance(raw, _label(job_file, project))
        makers.append(
            (job_file, functools.partial(_job, raw, job_file, project, spec.nodes, check_dependencies, provenance))
        )
    listed = [entry for raw in raws.values() for entry in _listed(raw)]
    for source in kernels:
        rel = _label(source, project)
        override = overrides.pop(source.stem, None)
        if source.stem in unread:
            continue
        if override is None and any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in listed):
            continue  # a file of a job file's kernel
        if override is None and source.stem in whole:
            if any(_missing(project, e) for e in _listed(raws[whole[source.stem]])):
                # that job's own error names its missing entry, and likely this file as meant (a typo
                # in `sources:` led with "a kernel no job file lists", a consequence: review 107)
                continue
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


def _doubled(job_files: list[Path], errors: list[ConfigError]) -> set[str]:
    """The kernels with two job files (k.yaml and k.yml), each told once: they were refused with
    words about another thing ("kernel: found nothing", "a header with no Build: line (and no job
    file)", blamed on the source), by which of the two listed `sources` (red-team 172)."""
    first: dict[str, Path] = {}
    for job_file in job_files:
        if (taken := first.setdefault(job_file.stem, job_file)) != job_file:
            errors.append(
                ConfigError(
                    str(job_file),
                    "",
                    f"a second job file for the kernel {job_file.stem!r} ({taken.name} is its first)",
                    "one job file per kernel: remove or rename one",
                )
            )
    return {job_file.stem for job_file in job_files if first[job_file.stem] != job_file}


def _missing(project: Path, entry: str) -> bool:
    try:
        return not (project / entry).exists()
    except OSError:  # a name too long for the file system: the entry's own error says so
        return True


def _listed(raw: Any) -> list[str]:
    """What a job file lists under sources and headers, as written (read before validation)."""
    if not isinstance(raw, dict):
        return []
    # one path written without brackets (`sources: kernels/k.cu`) lists it too: the schema's
    # error says to bracket it, and "a kernel no job file lists" led before it (review 150)
    entries = [[e] if isinstance(e, str) else e for e in (raw.get("sources"), raw.get("headers"))]
    return [e for listed in entries if isinstance(listed, list) for e in listed if isinstance(e, str)]
