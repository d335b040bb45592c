"""`python -m orchestrator.cli`: the `farm` command."""

from orchestrator.cli import main

main()
