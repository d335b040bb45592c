"""Retries of infrastructure failures, and when to give up on a node.

Only InfraErrors are retried (refused or dropped connections, timeouts of the
session, banner errors); a kernel's own failure is evidence and is never
retried into a pass. Each attempt is recorded. A node that fails
`unhealthy_after` times in a row is marked unhealthy for the rest of the run:
its remaining cells become infra-error at once, without further attempts, so
a dead node costs the run seconds, not its timeouts times its cells.
"""

from __future__ import annotations

import random
import threading
import time


class NodeHealth:
    def __init__(self, retries: int, backoff: float, unhealthy_after: int) -> None:
        self.retries = retries
        self.backoff = backoff
        self.unhealthy_after = unhealthy_after
        self._failures_in_a_row = 0
        self._lock = threading.Lock()
        self.reason = ""

    @property
    def unhealthy(self) -> bool:
        with self._lock:
            return self._failures_in_a_row >= self.unhealthy_after

    def failed(self, reason: str) -> None:
        with self._lock:
            self._failures_in_a_row += 1
            self.reason = reason

    def succeeded(self) -> None:
        with self._lock:
            self._failures_in_a_row = 0

    def pause(self, attempt: int) -> None:
        """Exponential backoff with jitter before attempt `attempt` (2, 3, ...)."""
        delay = self.backoff * (2 ** (attempt - 2))
        time.sleep(delay * random.uniform(0.5, 1.0))
