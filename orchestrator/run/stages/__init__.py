"""The per-cell stages, build -> inspect -> run, each stamped by one wrapper.

(probe and stage run once per node, in scheduler.py; their records are shared
by the node's cells.) The wrapper records each stage's name, start, duration
and status, and turns an InfraError into "this stage failed for infra reasons":
later stages are then not run. A kernel failing is not an exception: it is
evidence, handed to classify/, which alone decides the outcome.

Nothing on the node is reused on trust. A kernel runs as the same user as the
farm's own files, so it could rewrite another cell's cached binary or the
staged sources. Therefore:

- build: the staged sources and dependencies are verified against their
  digests right before nvcc and again after it (altered before: shipped again;
  altered during: infra-error); the binary's sha256 is taken at once.
- a cached build is reused only when its binary's sha256 is the one the store
  recorded for that build key; otherwise it is rebuilt, and the cell says so.
- inspect checks the binary is still the one built; run copies it into the
  cell's own scratch folder, checks the copy, and runs the copy there, pinned
  to its GPU with CUDA_VISIBLE_DEVICES (by UUID).
- stdout and stderr are read whole and scanned as they stream (streams.py):
  markers are matched over everything printed, the copy kept is bounded.

A cell is one round trip where the transport streams (trips.py: how the stages
travel and come back); here is what each stage's script holds, and what the farm
reads from what came back.

Every command the node runs is built here from quoted parts. Each runs under a
remote `timeout -k`, so a kernel that never ends is killed on the node itself
(with its whole process group), not only its SSH channel.
"""

from orchestrator.run.stages.pipeline import CellPipeline

__all__ = ["CellPipeline"]
