"""Loading farm.yaml, and every job it points at (jobs.py), into a validated, frozen Farm.

Everything that can be wrong with the configuration is found here, before any
connection or database is opened, and reported as ConfigErrors naming the file,
the key path, what was found and what was expected (with a did-you-mean for
unknown keys). Loading has no side effects.

Precedence for the settings a user may override: CLI flag > environment
(FARM_CONFIG, FARM_DATABASE) > farm.yaml > default. The CLI applies the first
two and passes overrides in; this module knows only the file and the defaults.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import followable, header, output_paths, own_files, srun_nodes
from orchestrator.config.database_url import check_url, raw_at_problem, resolve_database
from orchestrator.config.farm_spec import TOOLCHAIN_SEP, FarmSpec, NodeSpec
from orchestrator.config.jobs import Job, load_jobs
from orchestrator.config.local_workdirs import local_workdir_errors
from orchestrator.config.validation import check_names, validate
from orchestrator.config.yaml_file import read_yaml
from orchestrator.errors import ConfigError, ConfigErrors
from orchestrator.report.escape import page_name
from orchestrator.store.journal import journal_folder
from orchestrator.terminal import printable

COLUMN_MAX = 64  # results.node and node_snapshots.node are String(64): PostgreSQL enforces it


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
    def lock_dir(self) -> Path | None:
        """farm.yaml's `lock_dir` (relative to it), where the run lock goes; None: beside the database."""
        return None if self.spec.lock_dir is None else (self.root / Path(self.spec.lock_dir).expanduser()).resolve()

    @property
    def configured_database_url(self) -> str:
        """farm.yaml's own `database`, resolved as database_url is (which --database or
        FARM_DATABASE may have replaced)."""
        return resolve_database(self.spec.database, self.root)

    @property
    def source_folders(self) -> dict[str, Path]:
        """The folders of the course's own files, by farm.yaml's key: no report goes there."""
        return {key: (self.root / getattr(self.spec, key)).resolve() for key in ("jobs", "kernels")}


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
    top = [p for p in folder.glob("*.cu") if p.is_file() or p.is_symlink()]
    return sorted(top + _subfolder_kernels(folder))


def _subfolder_kernels(folder: Path) -> list[Path]:
    """The .cu files in kernels/'s subfolders (kernels/day97/scan97.cu) whose header has a
    Build: line: skipped unsaid before round 53, so `farm jobs scan97` found no job. One
    without a Build: line is a helper translation unit a job lists, not a kernel; hidden
    and linked folders are not entered (a link's target is no file of the kernel's own)."""
    found = []
    for path in folder.rglob("*.cu"):
        parts = path.relative_to(folder).parts
        if len(parts) < 2 or any(p.startswith(".") for p in parts):
            continue
        inside = [folder.joinpath(*parts[:n]) for n in range(1, len(parts))]
        if any(d.is_symlink() for d in inside) or not (path.is_file() or path.is_symlink()):
            continue
        if header.has_build_line(path):
            found.append(path)
    return found


_LOOKS_LIKE_A_JOB = re.compile(r"\.ya?ml(\.|$)", re.IGNORECASE)


def _unread_job_files(jobs_dir: Path, job_files: list[Path], listed: list[Path]) -> list[ConfigError]:
    """Files that look like job files where the farm reads none. `saxpy.YAML` or `saxpy.yaml.txt`
    was skipped, and the header's job ran in its place without the author's requirements (found by
    a red-team helper); so was `jobs/day97/scan97.yaml`, the course's kernels/day97/ layout, and with
    `jobs: kernels` a job beside its kernel in a subfolder (red-team 140). Hidden and linked
    folders are not entered, as kernels/ is not."""
    found = [
        f
        for f in listed
        if f not in job_files
        and f.is_file()  # a folder `old.yaml.d/` is no job file
        and not f.name.startswith(".")
        and _LOOKS_LIKE_A_JOB.search(f.name)
    ]
    nested = []
    for folder in (f for f in listed if f.is_dir() and not f.is_symlink() and not f.name.startswith(".")):
        for here, folders, files in os.walk(folder):
            folders[:] = sorted(d for d in folders if not d.startswith("."))  # links to folders: not walked
            nested += [
                Path(here, name)
                for name in sorted(files)
                if not name.startswith(".") and _LOOKS_LIKE_A_JOB.search(name) and Path(here, name).is_file()
            ]
    return [
        ConfigError(
            str(f),
            "",
            "a job file in a subfolder of the jobs folder, which the farm does not read" if f in nested
            else "a job file's name the farm does not read",
            f"KERNEL.yaml or KERNEL.yml, in lower case, in the jobs folder itself "
            f"({jobs_dir.name}/{f.name.split('.')[0]}.yaml)",
        )
        for f in [*found, *nested]
    ]  # fmt: skip


def _column_key(col: str) -> str:
    """A column's key path in farm.yaml: nodes.NODE, or nodes.NODE.toolchains.NAME."""
    node, _, toolchain = col.partition(TOOLCHAIN_SEP)
    return f"nodes.{node}.toolchains.{toolchain}" if toolchain else f"nodes.{node}"


def _shared_pages(file: Path, columns: dict[str, NodeSpec]) -> list[ConfigError]:
    """Columns whose report pages would be one file: page_name reads '+' as '_' (h200+cuda-13 and
    a node h200_cuda-13), and a case-insensitive disk (macOS, a Windows share) takes T4.html for
    t4.html. The later page overwrote the earlier, both heads linking to it (a red-team finding)."""
    seen: dict[str, str] = {}
    errors = []
    for col in columns:
        page = page_name(col)
        if (first := seen.setdefault(page.casefold(), col)) != col:
            errors.append(
                ConfigError(
                    str(file),
                    _column_key(col),
                    f"the column {col!r}, whose report page nodes/{page}.html is also {first!r}'s",
                    "a name no other node's page shares (names differing only in case, or in '+' and '_', "
                    "are one file)",
                )
            )
    return errors


def _shared_kernel_pages(jobs: dict[str, Job]) -> list[ConfigError]:
    """Kernels whose certification pages would be one file on a case-insensitive disk:
    kernels/Gemm.html is kernels/gemm.html there, the later page over the earlier, a
    failing kernel's row opening the other's VERIFIED page (a red-team finding)."""
    seen: dict[str, str] = {}
    errors = []
    for kernel in sorted(jobs):
        page = page_name(kernel)
        if (first := seen.setdefault(page.casefold(), kernel)) != kernel:
            errors.append(
                ConfigError(
                    str(jobs[kernel].file),
                    "kernel",
                    f"the kernel {kernel!r}, whose report page kernels/{page}.html is also {first!r}'s",
                    "a kernel name no other kernel's page shares (names differing only in case are one file)",
                )
            )
    return errors


def load_farm(
    file: Path | str, *, database: str | None = None, check_dependencies: bool = True, database_where: str | None = None
) -> Farm:
    """Load and validate farm.yaml and every job it points at.

    `check_dependencies=False` is for commands that only read the database
    (show, report): they need no CUTLASS installed to print a stored cell.
    `database_where` names where `database` came from in its errors (--database, FARM_DATABASE)."""
    if (unfollowed := followable.config_path_error(Path(file).absolute())) is not None:
        raise unfollowed
    file = Path(file).resolve()
    try:
        str(file).encode()
    except UnicodeEncodeError:  # its path is stored and shown as text (runs, pages): "a bug in farm" (rt167)
        raise ConfigError(
            printable(str(file)),
            "",
            "a path that is not valid UTF-8 (a folder named in another encoding)",
            "farm.yaml in a folder whose path is UTF-8: the farm stores and shows its paths as text; rename it",
        ) from None
    if not file.exists() and not file.is_symlink():  # cron starts in HOME: farm.yaml is then not where it looks
        raise ConfigError(
            str(file),
            "",
            "no such file",
            "the farm's configuration (farm.yaml, a YAML file): name it with --config or FARM_CONFIG "
            "(a cron job starts in its user's HOME, not in the farm's folder)",
        )
    raw = read_yaml(file, "the farm's configuration (farm.yaml)")
    errors = check_names(raw, "nodes", file) if isinstance(raw, dict) else []
    if isinstance(raw, dict) and not raw.get("nodes"):
        raise ConfigError(str(file), "nodes", "no nodes", "at least one node under `nodes:`")
    try:
        spec: FarmSpec = validate(FarmSpec, raw, file, "the farm: nodes, database, jobs, reports")
    except ConfigErrors as many:
        raise ConfigErrors(errors + many.errors) from None
    if errors:
        raise ConfigErrors(errors)
    check_url(spec.database, file)
    # before any of them is followed: a loop or a name too long was "a bug in farm" (red-team 225)
    if unfollowed_paths := followable.folder_errors(file, spec, database, database_where or "--database"):
        raise ConfigErrors(unfollowed_paths)
    root = file.parent
    jobs_dir = (root / spec.jobs).resolve()
    sources = {"jobs": jobs_dir, "kernels": (root / spec.kernels).resolve()}
    if problem := output_paths.site_folder_problem(root / Path(spec.reports).expanduser(), sources):
        raise ConfigError(str(file), "reports", *problem)
    # before the jobs load: a source that is the database was said as the job's error, not the URL's
    where = (database_where or "--database") if database else str(file)
    if database and (problem := raw_at_problem(database, where)) is not None:
        raise problem
    try:
        resolved = resolve_database(database or spec.database, root)
    except UnicodeEncodeError:  # a URL is text (FARM_DATABASE's bytes decode to one that is not)
        raise ConfigError(
            where,
            "" if database else "database",
            "a SQLite path that is not valid UTF-8",
            "a database path whose folder names are UTF-8 (a database URL is text)",
        ) from None
    if problem := output_paths.database_place_problem(resolved, file, sources):
        raise ConfigError(where, "" if database else "database", *problem)
    if spec.journal is not None:
        reports = (root / Path(spec.reports).expanduser()).resolve()
        journal = journal_folder("", root, spec.journal)
        if problem := output_paths.journal_folder_problem(journal, {**sources, "reports": reports}):
            raise ConfigError(str(file), "journal", *problem)
    # a local node's builds and raw outputs never among the site's pages, the journals or the course's files
    farm_folders = {
        "reports": (root / Path(spec.reports).expanduser()).resolve(),
        "journal": journal_folder(resolve_database(database or spec.database, root), root, spec.journal),
        **sources,
    }
    if errors := local_workdir_errors(file, spec, farm_folders):
        raise ConfigErrors(errors)
    if spec.lock_dir is not None and not (root / Path(spec.lock_dir).expanduser()).is_dir():
        found = f"{spec.lock_dir!r}, which is not a folder"
        raise ConfigError(
            str(file), "lock_dir", found, "a local folder with file locks, every farm run's (e.g. /var/lock/farm)"
        )
    if spec.lock_dir is not None and output_paths.inside(
        locks := (root / Path(spec.lock_dir).expanduser()).resolve(), farm_folders["reports"]
    ):
        # its holder file names this machine and the running farm's pid: published with the site (red-team 121)
        raise ConfigError(
            str(file), "lock_dir", f"{spec.lock_dir!r} ({locks}), in the farm's `reports` folder",
            "a folder apart from the published site (e.g. /var/lock/farm)",
        )  # fmt: skip
    project = jobs_dir.parent  # sources are relative to the folder that holds jobs/ (and kernels/)
    no_folder = ConfigError(
        str(file), "jobs", f"{spec.jobs!r}, which is not a folder", "a folder of job files (one YAML per kernel)"
    )
    if "jobs" in spec.model_fields_set and not jobs_dir.is_dir():
        # first: `jobs: nope/jobs` said `kernels` was outside nope/, a key the file did not write (red-team 225)
        raise no_folder
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
        if unread := _unread_job_files(jobs_dir, job_files, listed):
            raise ConfigErrors(unread)
        no_jobs = ConfigError(
            str(file),
            "jobs",
            f"no *.yaml files in {jobs_dir}",
            f"one job file per kernel, or kernels in {spec.kernels}/ whose headers have Build: lines",
        )
    else:
        no_jobs = no_folder
        if not kernels:
            raise no_jobs
    if not job_files and not kernels:
        raise no_jobs
    jobs, errors = load_jobs(spec, project, job_files, kernels, check_dependencies)
    if not jobs and not job_files and all(e.key == "Build" for e in errors):
        errors.insert(0, no_jobs)  # no job file and no header with a Build line: no jobs at all, say so first
    url = resolve_database(database or spec.database, root)
    own = own_files.own_files(file, spec, [url, resolve_database(spec.database, root)])
    errors += own_files.shipped(jobs, own)
    errors += _shared_kernel_pages(jobs)
    errors += srun_nodes.unbacked_launchers(jobs, spec.nodes)
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
    if shared := _shared_pages(file, columns):
        raise ConfigErrors(shared)
    if columns.keys() != spec.nodes.keys():
        spec = spec.model_copy(update={"nodes": columns})
    return Farm(file=file, spec=spec, jobs=jobs, database_url=url)
