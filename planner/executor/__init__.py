"""The executor's contract: what the Ansible rollouts need from a plan, computed in Python.

- :mod:`planner.executor.rollout`: a plan's steps as the playbooks' batches and settings.
- :mod:`planner.executor.faults`: what may be done to a node, given the nodes down now.
- :mod:`planner.executor.drift_read` and :mod:`planner.executor.drift`: what each node runs,
  against what was recorded applied.
- :mod:`planner.executor.restart_costs`: restart costs measured from earlier rollouts' records.
"""
