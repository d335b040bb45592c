"""`farm`: a thin command line over the library.

Each command loads the configuration, calls one library function and prints.
A FarmError becomes one "Error: ..." line on stderr and its documented exit
code (errors.py); README.md's "Exit codes" section lists them.
"""

# each command module registers its command on the group as it is imported
from orchestrator.cli import bisecting, nodes, results, verify  # noqa: F401
from orchestrator.cli.base import EXIT_MEANING, main
from orchestrator.cli.verify import _matrix_text

__all__ = ["EXIT_MEANING", "_matrix_text", "main"]
