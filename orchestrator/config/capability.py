"""Compute capabilities and the contracts kernels state over them.

A capability is always written "major.minor" ("7.5", "9.0"). "9" and "sm_90" are
refused rather than guessed at: 9 could mean 9.0 or "any 9.x", and sm_90 is a
compilation target, not a device property (sm_90a runs only on 9.0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

# ASCII digits, one for the minor (7.5, 8.9, 10.0, 12.1): `\d` took "٨.٠" for 8.0, and "7.50" read
# as 7.50 sat above 7.9 (a red-team finding); no major 0, which no card has
_CC_RE = re.compile(r"^([1-9][0-9]?)\.([0-9])$")


@total_ordering
@dataclass(frozen=True)
class ComputeCapability:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> ComputeCapability:
        """Parse "major.minor"; raise ValueError naming the accepted form."""
        match = _CC_RE.match(text.strip()) if isinstance(text, str) else None
        if not match:
            raise ValueError(
                'a compute capability written major.minor with one digit after the dot, quoted, e.g. "7.5" or '
                '"9.0" (not "9", "7.50" or "sm_90")'
            )
        return cls(int(match.group(1)), int(match.group(2)))

    def __lt__(self, other: ComputeCapability) -> bool:
        return (self.major, self.minor) < (other.major, other.minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class CapabilityContract:
    """Which devices a build must serve; every other device it must refuse."""

    exactly: ComputeCapability | None = None
    minimum: ComputeCapability | None = None
    maximum: ComputeCapability | None = None

    def admits(self, cc: ComputeCapability) -> bool:
        if self.exactly is not None:
            return cc == self.exactly
        if self.minimum is not None and cc < self.minimum:
            return False
        return not (self.maximum is not None and cc > self.maximum)

    def named(self) -> list[str]:
        """The capabilities the contract names, in order ("9.0"; "7.5", "8.9")."""
        return [str(cc) for cc in (self.exactly, self.minimum, self.maximum) if cc is not None]

    def __str__(self) -> str:
        if self.exactly is not None:
            return f"CC == {self.exactly}"
        parts = []
        if self.minimum is not None:
            parts.append(f">= {self.minimum}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum}")
        return "CC " + " and ".join(parts) if parts else "any CC"
