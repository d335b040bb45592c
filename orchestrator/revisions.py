"""A kernel's job as it was at any commit of the farm's git repository.

`farm bisect` runs a kernel as it was in the past. The job and its inputs of a
commit are read out of git (`ls-tree`, one `cat-file --batch`) into a
temporary folder and loaded by the farm's own loader, so a job from a job
file and one from its kernel's header (config/header.py) load as `farm verify`
loads them now; the user's working tree and index are never touched, and
nothing here writes to the repository. Paths reach git as literal pathspecs.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestrator.config.farm import Farm, load_farm
from orchestrator.config.include_lines import quoted_includes
from orchestrator.config.includes import MAX_HEADERS
from orchestrator.config.jobs import Job
from orchestrator.config.yaml_file import read_yaml
from orchestrator.errors import ConfigError

GIT_TIMEOUT = 120.0
# a Git LFS pointer file's first line (and its older name): a clone without `git lfs` holds it for the content
LFS_POINTERS = (b"version https://git-lfs.github.com/spec/v1", b"version https://hawser.github.com/spec/v1")


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    date: str  # author date, ISO 8601

    @property
    def short(self) -> str:
        return self.sha[:12]


class Git:
    """Read-only git, in the repository that holds the farm's jobs."""

    def __init__(self, top: Path) -> None:
        self.top = top

    @classmethod
    def around(cls, folder: Path) -> Git:
        done = _git(folder, "rev-parse", "--show-toplevel", check=False)
        if done.returncode != 0:
            raise ConfigError(
                str(folder),
                "",
                "a folder outside any git repository",
                "a farm whose jobs and kernels are committed in git (farm bisect walks their history)",
            )
        return cls(Path(done.stdout.decode().strip()).resolve())

    def text(self, *args: str, check: bool = True) -> str:
        return _git(self.top, *args, check=check).stdout.decode("utf-8", "replace").strip()

    def resolve(self, rev: str, key: str) -> Commit:
        if not rev or rev.startswith("-") or any(ord(c) < 32 or c.isspace() for c in rev):
            raise ConfigError(str(self.top), key, repr(rev), "a revision: a commit hash, tag or branch")
        done = _git(self.top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if done.returncode != 0:
            raise ConfigError(
                str(self.top), key, f"{rev!r}, which is not a commit of this repository", "a commit, tag or branch"
            )
        return self.commit(done.stdout.decode().strip())

    def commit(self, sha: str) -> Commit:
        return self.log("-1", sha)[0]

    def log(self, *args: str) -> list[Commit]:
        """Commits as `git log ARGS` lists them, read in one call."""
        shown = self.text("log", "--no-show-signature", "--format=%H%x00%s%x00%aI%x00", *args)
        fields = [f.strip() for f in shown.split("\0")]
        return [Commit(*fields[at : at + 3]) for at in range(0, len(fields) - 2, 3)]

    def names(self, *args: str, paths: tuple[str, ...] = ()) -> list[str]:
        """The paths `git ARGS -z -- PATHS` lists (--name-only), unquoted."""
        listed = _git(self.top, *args, "-z", "--", *paths).stdout.decode("utf-8", "surrogateescape")
        return [name.strip("\n") for name in listed.split("\0") if name.strip("\n")]

    def is_ancestor(self, older: str, newer: str) -> bool:
        return _git(self.top, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def rev_list(self, *args: str, paths: tuple[str, ...] | None = None) -> list[str]:
        tail = ("--", *paths) if paths is not None else ()
        return self.text("rev-list", *args, *tail).split()

    def parent(self, sha: str) -> str | None:
        done = _git(self.top, "rev-parse", "--verify", "--quiet", f"{sha}^1", check=False)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def files(self, sha: str, paths: list[str]) -> dict[str, tuple[str, str]]:
        """path -> (mode, blob id) of every file under `paths` at commit `sha`."""
        if not paths:
            return {}
        listed = _git(self.top, "ls-tree", "-r", "-z", "--full-tree", sha, "--", *paths).stdout
        found = {}
        for entry in listed.decode("utf-8", "surrogateescape").split("\0"):
            if entry:
                meta, path = entry.split("\t", 1)
                mode, _kind, blob = meta.split()
                found[path] = (mode, blob)
        return found

    def blobs(self, ids: list[str]) -> dict[str, bytes]:
        """Blob contents through one `git cat-file --batch`."""
        if not ids:
            return {}
        out = _git(self.top, "cat-file", "--batch", stdin="".join(f"{i}\n" for i in ids).encode()).stdout
        contents, at = {}, 0
        for blob in ids:
            header_end = out.index(b"\n", at)
            _sha, _kind, size = out[at:header_end].decode().split()
            start = header_end + 1
            contents[blob] = out[start : start + int(size)]
            at = start + int(size) + 1
        return contents


def _git(cwd: Path, *args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    # literal pathspecs: a kernel's path is a path, never a glob or a magic ":(...)" spec
    env = {**os.environ, "GIT_LITERAL_PATHSPECS": "1", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args], input=stdin, capture_output=True, timeout=GIT_TIMEOUT, env=env, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        found = f"git that cannot be run ({err})"
        raise ConfigError(str(cwd), "", found, "git on PATH (farm bisect reads history)") from err
    if check and done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise ConfigError(str(cwd), "", f"`git {args[0]}` failing ({said})", "a readable git repository")
    return done


class KernelHistory:
    """One kernel (and optionally one variant) of a farm, at any commit."""

    def __init__(self, farm: Farm, kernel: str, variant: str = "") -> None:
        self.farm = farm
        self.kernel = kernel
        self.variant = variant
        jobs_dir = (farm.root / farm.spec.jobs).resolve()
        self.git = Git.around(jobs_dir if jobs_dir.is_dir() else farm.root)
        self.project = self._in_repo(jobs_dir.parent, "jobs")  # sources are relative to it
        self.jobs_rel = self._in_repo(jobs_dir, "jobs")
        self.job_files = tuple(f"{self.jobs_rel}/{kernel}.{ext}" for ext in ("yaml", "yml"))
        # a farm whose kernels' headers give their jobs (config/header.py): the kernel's own .cu
        kernels = getattr(farm.spec, "kernels", None)
        self.kernels_rel = self._in_repo((farm.root / kernels).resolve(), "kernels") if kernels else None
        self.kernel_sources = (f"{self.kernels_rel}/{kernel}.cu",) if self.kernels_rel else ()
        self.where = f"{self.kernel_sources[0]} or {self.kernels_rel}/FOLDER/{kernel}.cu" if self.kernels_rel else ""

    def _in_repo(self, folder: Path, key: str) -> str:
        try:
            return folder.relative_to(self.git.top).as_posix()
        except ValueError:
            found = f"{folder}, outside the repository {self.git.top}"
            raise ConfigError(str(self.farm.file), key, found, "a folder in it (it is read from git)") from None

    def repo_path(self, entry: str) -> str:
        return f"{self.project}/{entry}" if self.project != "." else entry

    def _write(self, sha: str, tree: Path, files: dict[str, tuple[str, str]]) -> str:
        """Write files of commit `sha` under tree; or say why one cannot be."""
        odd = [path for path, (mode, _blob) in files.items() if mode not in ("100644", "100755")]
        if odd:
            return f"{odd[0]} is a link or a submodule at {sha[:12]}, not a file"
        contents = self.git.blobs(sorted({blob for _mode, blob in files.values()}))
        # built as source, a pointer failed to compile and its commit could be named the first bad one
        pointer = next((path for path, (_mode, blob) in files.items() if contents[blob].startswith(LFS_POINTERS)), "")
        if pointer:
            return f"{pointer} is a Git LFS pointer at {sha[:12]}, not its content (farm bisect does not run git lfs)"
        for rel, (_mode, blob) in files.items():
            target = tree / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(contents[blob])
        return ""

    def _sources_at(self, sha: str) -> list[str]:
        """The kernel's .cu files at `sha` where the loader looks for them (config/farm.py): kernels/KERNEL.cu
        and kernels/FOLDER/KERNEL.cu (the loader takes one there with a Build line). Only the first was
        read: a kernel in kernels/day97/ had "no job" at every commit and bisect exited 3 (review 152)."""
        if not self.kernels_rel:
            return []
        return [path for path in sorted(self.git.files(sha, [self.kernels_rel])) if self._is_source(path)]

    def _is_source(self, path: str) -> bool:
        """Whether `path` is a place of the kernel's .cu; hidden folders are not entered, as by the loader."""
        base = "" if self.kernels_rel in (None, ".") else f"{self.kernels_rel}/"
        if self.kernels_rel is None or not path.startswith(base):
            return False
        parts = path[len(base) :].split("/")
        return parts[-1] == f"{self.kernel}.cu" and not any(p.startswith(".") for p in parts[:-1])

    def _job_file(self, sha: str, tree: Path) -> tuple[bool, dict, str]:
        """The kernel's job file and .cu at `sha`, written under tree: whether
        either exists, the job file's YAML ({} without one), and why it cannot be read."""
        found = self.git.files(sha, [*self.job_files, *self._sources_at(sha)])
        if not found:
            names = " or ".join([self.job_files[0], *([self.where] if self.where else [])])
            return False, {}, f"there is no job for kernel {self.kernel!r} ({names})"
        why = self._write(sha, tree, found)
        raw: object = {}
        for name in (f for f in self.job_files if f in found and not why):
            try:
                raw = read_yaml(tree / name, "a job file")
            except ConfigError as err:
                why = self._at(err, tree)
        return True, raw if isinstance(raw, dict) else {}, why

    @staticmethod
    def _entries(raw: dict) -> list[str]:
        listed = [raw.get("sources"), raw.get("headers")]
        entries = [e for one in listed if isinstance(one, list) for e in one if isinstance(e, str)]
        return [e for e in entries if e and not e.startswith("/") and ".." not in e.split("/")]

    def job_at(self, sha: str, dest: Path) -> tuple[Job | None, str]:
        """The kernel's job as of commit `sha`, loaded by the farm's own loader from
        its files read out of git into dest; or None and why it does not load there."""
        tree = dest / "tree"
        exists, raw, why = self._job_file(sha, tree)
        if not exists or why:
            return None, why
        listed = self.git.files(sha, [self.repo_path(e) for e in self._entries(raw)])
        why = self._write(sha, tree, listed) or self._write_included(sha, tree, [*listed, *self._sources_at(sha)])
        if why:
            return None, why
        # a farm of this one job (its nodes do not matter: the run uses today's farm.yaml)
        doc: dict[str, object] = {"jobs": str(tree / self.jobs_rel), "nodes": {"bisect": {"transport": "local"}}}
        (tree / self.jobs_rel).mkdir(parents=True, exist_ok=True)
        if self.kernels_rel:
            doc["kernels"] = str(tree / self.kernels_rel)
            (tree / self.kernels_rel).mkdir(parents=True, exist_ok=True)
        (dest / "farm.yaml").write_text(yaml.safe_dump(doc))
        try:
            # dependencies are staged from this machine or the node as they are now; a missing one is infra
            job = load_farm(dest / "farm.yaml", check_dependencies=False).jobs.get(self.kernel)
        except ConfigError as err:
            return None, self._at(err, tree)
        if job is None:
            return None, f"there is no job for kernel {self.kernel!r}"
        if self.variant and self.variant not in job.spec.variants:
            variants = ", ".join(job.spec.variants)
            return None, f"kernel {self.kernel!r} has no variant {self.variant!r} (it has {variants})"
        return job, ""

    def _write_included(self, sha: str, tree: Path, written: list[str]) -> str:
        """Write the headers that the written sources include from beside them (`#include
        "scale.cuh"`), and theirs, as of commit `sha`: the loader finds them beside their includer
        (config/includes.py), as it does in a working tree. With the .cu alone, a kernel whose job
        comes from its header failed to build ("No such file") at every commit from the one that
        moved code into a header, and that commit was named the first bad one (a red-team finding)."""
        seen = {rel for rel in written if (tree / rel).is_file()}
        queue = sorted(seen)
        # past the limit the loader says so (config/includes.py): once the headers stopped here
        # unsaid, and the commit's build failed for those not written ("No such file")
        limit = len(seen) + MAX_HEADERS + 1
        while queue and len(seen) < limit:
            wanted = set()
            for rel in queue:
                try:
                    includes = quoted_includes(tree / rel)
                except ConfigError as err:  # a file past the size the farm reads
                    return self._at(err, tree)
                for _line, name in includes:
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(rel), name))
                    if "\0" not in path and path != ".." and not path.startswith(("/", "../")) and path not in seen:
                        wanted.add(path)
            # a pathspec names a folder's files too: only a file at the included path itself
            found = {p: entry for p, entry in self.git.files(sha, sorted(wanted)).items() if p in wanted}
            why = self._write(sha, tree, found)
            if why:
                return why
            seen.update(found)
            queue = sorted(found)
        return ""

    @staticmethod
    def _at(err: ConfigError, tree: Path) -> str:
        """A load error, with the temporary folder's name taken out of it."""
        return str(err).replace(f"{tree}/", "").replace(str(tree.parent), "(commit)")

    def input_paths(self, good: str, bad: str, inputs: set[str]) -> tuple[str, ...]:
        """The paths to watch from `good` to `bad`: the job file, the kernel's .cu,
        `inputs` (the job's files at both ends), and what the job file listed at
        each commit between that changed it: a source listed only in the middle of
        the range is still watched."""
        paths = {*self.job_files, *self.kernel_sources, *inputs, *self._sources_at(good), *self._sources_at(bad)}
        if self.kernels_rel:  # the .cu in a subfolder at a commit between, moved there and back
            log = ("log", "--format=", "--name-only", "--ancestry-path", f"{good}..{bad}")
            named = self.git.names(*log, paths=(self.kernels_rel,))
            paths.update(p for p in named if self._is_source(p))
        changed = self.git.rev_list("--ancestry-path", f"{good}..{bad}", paths=self.job_files)
        with tempfile.TemporaryDirectory(prefix="farm-bisect-") as tmp:
            for sha in {good, bad, *changed}:
                _exists, raw, _why = self._job_file(sha, Path(tmp) / sha)
                paths.update(self.repo_path(e) for e in self._entries(raw))
        return tuple(sorted(paths))


def farm_commit(root: Path) -> str | None:
    """The farm's git commit, "+dirty" when tracked files differ from it.

    FARM_COMMIT overrides it, for a copy of the tree without .git (the lent
    GPU machine gets the working tree only)."""
    if os.environ.get("FARM_COMMIT"):
        return os.environ["FARM_COMMIT"]

    def git(*args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None

    head = git("rev-parse", "--verify", "HEAD")
    if head is None or head.returncode != 0:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = status is not None and status.returncode == 0 and status.stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")
