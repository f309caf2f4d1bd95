"""Sub-commands of the ``kairos`` console script (see planner/cli.py)."""
