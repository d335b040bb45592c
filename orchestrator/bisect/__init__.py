"""`farm bisect`: the commit that broke a cell, found by running the farm on history.

A cell (a kernel's variant on a node) that was as expected at one commit and
is not at a later one changed because one of its inputs changed: the job file,
a source or a header. Only the commits between the two that touched those files
can be the cause (`git rev-list --ancestry-path GOOD..BAD -- PATHS`), so only
they are candidates; docs, other kernels and the farm's own code are never run.
Dependencies such as CUTLASS are not in git: every commit is built against the
copy this machine (or the node, per farm.yaml) holds now.

Each tested commit is an ordinary farm run (trigger "bisect", the commit in its
selection), stored in the database and journal like any other: the job and its
inputs as they were at that commit, read out of git into a temporary folder
(the user's working tree and index are never touched), on the node as the
*current* farm.yaml describes it (the hosts and keys of the past are of no
use). A commit whose inputs equal those of one built before has the same build
key, so the node's cached build is reused (run/stages/build.py) and nvcc is not run.

The walk tests BAD first (it must be not as expected), then GOOD (it must be as
expected), then halves the candidates. A commit whose job does not load there
(a missing source, a malformed job file, an input that is a Git LFS pointer)
cannot be judged and is skipped, as `git bisect skip` does. A cell that ends in infra-error (the node down) is
neither good nor bad: the walk stops and says so; it never guesses. The first
bad commit's parent is judged by the last good commit when no input changed
between them (the same build key), and is run otherwise (history with merges).
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from orchestrator.bisect.bisection import Bisection, Ending, State, Tested
from orchestrator.config.farm import Farm
from orchestrator.config.jobs import Job
from orchestrator.errors import EXIT_INFRA, ConfigError, StoppedBeforeRun
from orchestrator.outcomes import is_as_expected, is_infra
from orchestrator.plan import Cell, SelectionError, plan_cells, unknown_nodes
from orchestrator.revisions import Commit, KernelHistory
from orchestrator.run.scheduler import FarmRun
from orchestrator.run.stopping import reap_dead_runs
from orchestrator.run.summary import NullListener
from orchestrator.store.database import Store
from orchestrator.store.journal import journal_folder
from orchestrator.store.lock import run_lock
from orchestrator.store.queries import BISECT_TRIGGER

TRIGGER = BISECT_TRIGGER  # its runs are not the fleet's standing, nor a metric's baseline (store)


class _OnStart(NullListener):
    def __init__(self, started: Callable[[], None]) -> None:
        self.started = started

    def run_started(self, run_id: int, cells: list[Cell]) -> None:
        self.started()


class Bisector:
    """One `farm bisect`: validates its selection and revisions when created
    (nothing runs, nothing is written), then `run()` walks the history under the
    farm's run lock. `stop(reason)` (a signal) stops the current run and the walk."""

    def __init__(
        self,
        farm: Farm,
        selector: str,
        node: str,
        good: str,
        bad: str,
        *,
        wait: float = 0.0,
        say: Callable[[str], None] = lambda _line: None,
        cache_dir: Path | None = None,
    ) -> None:
        self.farm = farm
        self.wait = wait  # seconds to queue behind another run's lock
        self.kernel, _, self.variant = selector.partition(":")
        self.selector = selector
        if node not in farm.nodes:
            raise SelectionError(f"{unknown_nodes([node])} in {farm.file}; nodes: {', '.join(farm.nodes)}")
        self.node = node
        self.say = say
        self.cache_dir = cache_dir
        self.history = KernelHistory(farm, self.kernel, self.variant)
        self.git = self.history.git
        self.good = self.git.resolve(good, "--good")
        self.bad = self.git.resolve(bad, "--bad")
        if self.good.sha == self.bad.sha:
            raise ConfigError(str(self.git.top), "--good", f"{good!r}, the same commit as --bad", "an older commit")
        if not self.git.is_ancestor(self.good.sha, self.bad.sha):
            raise ConfigError(
                str(self.git.top),
                "--good",
                f"{good!r} ({self.good.short}), which is not an ancestor of --bad {bad!r} ({self.bad.short})",
                "a commit that --bad descends from",
            )
        inputs: set[str] = set()
        for end, rev, commit in (("--bad", bad, self.bad), ("--good", good, self.good)):
            with tempfile.TemporaryDirectory(prefix="farm-bisect-") as tmp:
                job, why = self.history.job_at(commit.sha, Path(tmp))
                if job is None:
                    hint = f"Kernels of {farm.file.name} now: {', '.join(sorted(farm.jobs)) or 'none'}."
                    found = f"{rev!r} ({commit.short}), where {why}"
                    raise ConfigError(str(self.git.top), end, found, "a commit where the job loads", hint)
                inputs.update(self.history.repo_path(rel) for rel in job.files)
        self.paths = self.history.input_paths(self.good.sha, self.bad.sha, inputs)
        self.result = Bisection(selector, node, self.good, self.bad, self.paths)
        self.known: dict[str, Tested] = {}  # sha -> its verdict, each commit judged once
        # the (variant, card) cells not as expected at --bad: every other commit is judged on those
        self.watch: set[tuple[str, str]] | None = None
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._current: FarmRun | None = None
        self._walked = False  # its walk returned: a stop now cuts no run short (only the render is left)

    # stopping -------------------------------------------------------------
    @property
    def stopping(self) -> str | None:
        return self._stop_reason

    @property
    def ended(self) -> bool:
        """The walk has returned, every run of it stored (as FarmRun.ended)."""
        return self._walked

    def stop(self, reason: str) -> None:
        with self._lock:
            self._stop_reason = self._stop_reason or reason
            current = self._current
        if current is not None:
            current.stop(reason)

    def _stopped_waiting(self) -> None:
        """Called while the run lock is waited for: a stop then (SIGTERM during `--wait 600`
        behind a cron's run) waited out the whole wait before it was heard (round 93's note)."""
        if self._stop_reason is not None:
            raise StoppedBeforeRun(
                f"farm bisect was stopped by {self._stop_reason} while it waited for the run lock: "
                "no commit was tested and nothing was stored"
            )

    def _started(self, run: FarmRun | None) -> None:
        # a run can be stopped once it has started (it knows its nodes); a stop asked before applies now
        assert run is not None
        with self._lock:
            self._current = run
            reason = self._stop_reason
        if reason is not None:
            run.stop(reason)

    # testing a commit -------------------------------------------------------
    def _test(self, commit: Commit, role: str) -> Tested:
        if commit.sha in self.known:
            return self.known[commit.sha]
        with tempfile.TemporaryDirectory(prefix="farm-bisect-") as tmp:
            job, why = self.history.job_at(commit.sha, Path(tmp))
            if job is None:
                tested = Tested(commit, role, State.SKIPPED, why)
            elif self.stopping:
                tested = Tested(commit, role, State.INFRA, f"stopped by {self.stopping}", exit_code=EXIT_INFRA)
            else:
                tested = self._run(commit, role, job)
        self.known[commit.sha] = tested
        self.result.tested.append(tested)
        reused = " (build reused)" if tested.builds_reused else ""
        where = f" [run {tested.run_id}, result {tested.result_id}]" if tested.run_id else ""
        self.say(f"{role:<9} {commit.short} {tested.state.value}: {tested.reason}{where}{reused}")
        return tested

    def _run(self, commit: Commit, role: str, job: Job) -> Tested:
        at = dataclasses.replace(self.farm, jobs={self.kernel: job})  # the node from today's farm.yaml
        cells = plan_cells(at, [self.selector], [self.node])
        run: FarmRun | None = None
        started = _OnStart(lambda: self._started(run))
        run = FarmRun(at, self.store, listener=started, trigger=TRIGGER, cache_dir=self.cache_dir)
        try:
            summary = run.execute(cells, f"bisect {self.selector} --node {self.node} at {commit.sha}")
        finally:
            with self._lock:
                self._current = None
        results = summary.results
        if self.watch is not None:  # judged on the cells that were bad at --bad, not on another's failure
            ran, results = results, [(c, r, i) for c, r, i in results if (c.variant, c.device) in self.watch]
            if ran and not results and not summary.internal:
                # none of them is at this commit (a variant renamed): untestable, not "no cell ran", an
                # infra-error that stopped the walk with exit 4 on a node that ran every cell (a red-team finding)
                why = f"none of the cells not as expected at --bad is at this commit (it ran {len(ran)} other)"
                return Tested(commit, role, State.SKIPPED, why, summary.run_id, exit_code=summary.exit_code)
        infra = [(r, i) for _c, r, i in results if r.verdict and is_infra(r.verdict.outcome)]
        bad = [(r, i) for _c, r, i in results if r.verdict and not is_as_expected(r.verdict.outcome)]
        if role == "bad end" and self.watch is None:
            self.watch = {
                (c.variant, c.device) for c, r, _i in results if r.verdict and not is_as_expected(r.verdict.outcome)
            }
        state = State.INFRA if summary.internal or infra or not results else State.BAD if bad else State.GOOD
        result, result_id = (infra or bad or [(r, i) for _c, r, i in results] or [(None, None)])[0]
        reason = "no cell ran"
        if result is not None and result.verdict is not None:
            verdict = result.verdict
            stage = f" at {verdict.failed_stage}" if verdict.failed_stage else ""
            reason = f"{verdict.outcome.value}{stage}: {verdict.reason}"
        return Tested(
            commit,
            role,
            state,
            reason,
            summary.run_id,
            result_id,
            builds_reused=sum(1 for _c, r, _i in results if r.build_cached),
            exit_code=summary.exit_code,
        )

    # the walk ---------------------------------------------------------------
    def run(self, then: Callable[[Bisection], None] | None = None) -> Bisection:
        """Walk the history under the farm's run lock; every run is stored. `then` (the
        report's render) runs under the lock too: rendered after it, the walk's run was
        written over a `farm verify` that started meanwhile (a red-team finding)."""
        with run_lock(self.farm.database_url, self.farm.root, self.wait, self.farm.lock_dir, self._stopped_waiting):
            self.store = Store(self.farm.database_url)
            self.store.outage.wait = self.farm.spec.store_wait  # store/outage.py
            self.store.outage.stopped = lambda: self.stopping  # a stop ends that wait
            try:
                folder = journal_folder(self.farm.database_url, self.farm.root, self.farm.spec.journal)
                aborted = self.store.abort_unfinished_runs(folder)  # each one's closing mark (store/closing.py)
                for one in aborted:
                    self.say(one.said())
                tokens = self.store.run_tokens([one.run_id for one in aborted])
                for run_id, node, count in reap_dead_runs({self.node: self.farm.nodes[self.node]}, tokens):
                    self.say(f"run {run_id}: killed {count} process{'es' * (count != 1)} it left on {node}")
                self._walk()
                self._walked = True
            finally:
                self.store.close()
            if then is not None:
                then(self.result)
        return self.result

    def _finish(self, ending: Ending, message: str) -> None:
        self.result.ending = ending
        self.result.message = message

    def _candidates(self, bad: Commit) -> tuple[int, list[Commit]]:
        """How many commits lie on the ancestry path GOOD..bad, and those of them
        that touched the inputs, oldest first."""
        commits = self.git.log("--reverse", "--topo-order", "--ancestry-path", f"{self.good.sha}..{bad.sha}")
        touched = set(self.git.rev_list("--ancestry-path", f"{self.good.sha}..{bad.sha}", paths=self.paths))
        return len(commits), [c for c in commits if c.sha in touched]

    def _walk(self) -> None:
        result = self.result
        bad = self.bad
        result.commits_in_range, seq = self._candidates(bad)
        result.candidates = len(seq)
        present = {*self.git.files(self.good.sha, list(self.paths)), *self.git.files(bad.sha, list(self.paths))}
        watched = [p for p in self.paths if p in present or any(f.startswith(p + "/") for f in present)]
        self.say(
            f"bisecting {self.selector} on {self.node} from {self.good.short} (good) to {bad.short} (bad): "
            f"{len(seq)} of the {result.commits_in_range} commits touched its inputs ({', '.join(watched)})"
        )
        ends = self._test(bad, "bad end")
        if ends.state is State.GOOD:
            return self._finish(Ending.BAD_IS_GOOD, f"--bad {bad.short} is as expected: nothing to bisect")
        if ends.state is not State.INFRA:
            ends = self._test(self.good, "good end")
            if ends.state is State.BAD:
                return self._finish(
                    Ending.GOOD_IS_BAD,
                    f"--good {self.good.short} is not as expected ({ends.reason}): pick an older one",
                )
        if ends.state is State.SKIPPED:  # --good has none of the cells bad at --bad: nothing is backed
            return self._finish(Ending.GOOD_IS_BAD, f"--good {self.good.short} cannot be judged ({ends.reason})")
        if ends.state is State.INFRA:
            return self._stopped(ends)
        while True:
            lo, hi = -1, next((i for i, c in enumerate(seq) if c.sha == bad.sha), len(seq))
            while hi - lo > 1:
                mid = self._pick(seq, lo, hi)
                if mid is None:
                    result.suspects = seq[lo + 1 : hi] + ([seq[hi]] if hi < len(seq) else [bad])
                    names = ", ".join(c.short for c in result.suspects)
                    untestable = ", ".join(c.short for c in result.suspects[:-1])
                    return self._finish(
                        Ending.AMBIGUOUS, f"the first bad commit is one of {names}: {untestable} cannot be tested"
                    )
                tested = self._test(seq[mid], "step")
                if tested.state is State.INFRA:
                    return self._stopped(tested)
                if tested.state is State.GOOD:
                    lo = mid
                elif tested.state is State.BAD:
                    hi = mid
            last_good = self.known[seq[lo].sha] if lo >= 0 else self.known[self.good.sha]
            if hi == len(seq):
                return self._finish(
                    Ending.OUTSIDE,
                    f"no commit after {last_good.commit.short} changed the kernel's inputs, yet it is as expected "
                    f"and {bad.short} is not: the cause is outside git (the node, its nvcc or driver, a "
                    "dependency such as CUTLASS) or the kernel is flaky",
                )
            first_bad = self.known[seq[hi].sha]
            parent = self._parent_verdict(first_bad.commit, last_good)
            if parent is None:
                return None
            if parent.state is State.BAD:  # history with merges: the change came in elsewhere
                bad = parent.commit
                _count, seq = self._candidates(bad)
                continue
            result.first_bad, result.last_good = first_bad, parent
            return self._finish(Ending.FOUND, f"first bad commit: {first_bad.commit.sha}")

    def _parent_verdict(self, first_bad: Commit, last_good: Tested) -> Tested | None:
        """The first bad commit's parent, judged: by the last good commit when no
        input changed between them, else by its own run. None when the walk ended."""
        parent_sha = self.git.parent(first_bad.sha)
        assert parent_sha is not None  # GOOD is an ancestor
        self.result.parent = self.git.commit(parent_sha)
        same = parent_sha == last_good.commit.sha or (
            self.git.is_ancestor(last_good.commit.sha, parent_sha)
            and not self.git.rev_list("-n1", f"{last_good.commit.sha}..{parent_sha}", paths=self.paths)
        )
        if same:
            return last_good
        tested = self._test(self.result.parent, "parent")
        if tested.state is State.INFRA:
            self._stopped(tested)
            return None
        if tested.state is State.SKIPPED:
            self.result.suspects = [first_bad]
            self._finish(Ending.AMBIGUOUS, f"{first_bad.short} is bad, but its parent cannot be tested")
            return None
        return tested

    def _stopped(self, tested: Tested) -> None:
        why = f"stopped by {self.stopping}" if self.stopping else f"{tested.commit.short} could not be judged"
        self._finish(Ending.STOPPED, f"{why} ({tested.reason}): no verdict either way; the walk stops here")

    def _pick(self, seq: list[Commit], lo: int, hi: int) -> int | None:
        """The open candidate nearest the middle that is not untestable."""
        middle = (lo + hi) // 2
        for index in sorted(range(lo + 1, hi), key=lambda i: (abs(i - middle), i)):
            known = self.known.get(seq[index].sha)
            if known is None or known.state is not State.SKIPPED:
                return index
        return None


def bisect(
    farm: Farm,
    selector: str,
    node: str,
    good: str,
    bad: str,
    *,
    wait: float = 0.0,
    say: Callable[[str], None] = lambda _line: None,
    cache_dir: Path | None = None,
) -> Bisection:
    """Find the first commit between `good` and `bad` at which the cell
    `selector` on `node` stops being as expected (see the module's docstring)."""
    return Bisector(farm, selector, node, good, bad, wait=wait, say=say, cache_dir=cache_dir).run()
