"""Red-team round 228: what a kernel's process does on the node while the farm runs it.

Broke (before/after):
1. A kernel that ignores SIGXFSZ (Python does; a launcher may) printed its pass marker, then more than
   the farm's size limit on what a run writes (`ulimit -f`, 256 MiB), then CUDA's error text, and
   exited 0: the writes past the limit failed (EFBIG) unseen, and the cell was `pass`. Now a pass
   whose stdout or stderr reached the limit is `fail`, its reason naming the limit.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from farm_cli import farm
from toyfarm import toy_on_t4

from orchestrator.classify import classify
from orchestrator.classify.evidence import Evidence
from orchestrator.outcomes import Outcome
from orchestrator.plan import Expectation

# the pass marker, then 300 MiB of lines past the farm's 256 MiB limit, then CUDA's words; exit 0
FLOODS = r"""#include <cstdio>
#include <csignal>
#include <cstring>
#include <unistd.h>
int main() {
  signal(SIGXFSZ, SIG_IGN);
  std::printf("toy: PASS\n");
  std::fflush(stdout);
  static char block[1 << 20];
  memset(block, 'x', sizeof block);
  for (unsigned i = 0; i < sizeof block; i += 64) block[i] = '\n';
  for (int i = 0; i < 300; i++) (void)!write(1, block, sizeof block);
  const char *said = "\nCUDA error: an illegal memory access was encountered\n";
  (void)!write(1, said, strlen(said));
  return 0;
}
"""


def _cells(root: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(root / "results.db") as db:
        return list(db.execute("SELECT outcome, reason, stdout_size FROM results"))


def test_a_pass_whose_output_reached_the_size_limit_is_no_pass(tmp_path: Path) -> None:
    """Before: pass, "exit 0 and the pass marker on stdout (line 1)", stdout 268435456 bytes (the
    limit), the CUDA error after it never seen. Figure: fail, its reason naming the size limit."""
    config, env = toy_on_t4(tmp_path, FLOODS)
    ran = farm("verify", "--all", cwd=config.parent, env=env, timeout=240)
    ((outcome, reason, size),) = _cells(tmp_path)
    assert size == 256 << 20, size  # the limit cut it
    assert outcome == "fail" and "size limit" in reason, (outcome, reason)
    assert ran.returncode == 1, ran.stdout + ran.stderr


def test_the_rule_takes_no_failure_or_refusal_away() -> None:
    """A fail stays the kernel's own fail (its exit), a pass below the limit stays a pass."""
    exp = Expectation(Outcome.PASS, "its contract serves this card")
    base = {"build_exit": 0, "inspect_exit": 0, "run_exit": 0, "pass_line": 1, "kernel_started": True}
    assert classify(Evidence(**base), exp).outcome is Outcome.PASS
    cut = classify(Evidence(**base, output_at_limit="stderr"), exp)
    assert cut.outcome is Outcome.FAIL and "its stderr reached" in cut.reason, cut
    failed = classify(Evidence(**{**base, "run_exit": 1}, output_at_limit="stdout"), exp)
    assert failed.outcome is Outcome.FAIL and "size limit" not in failed.reason, failed
