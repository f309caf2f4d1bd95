"""Experiments on the lab: the payoff experiment, trace replays, saved SSTable layouts and
scratch servers.

- :mod:`planner.lab.payoff`: SOPHIA's payoff experiment, in minutes.
- :mod:`planner.lab.simulator`: a trace replayed under Kairos' plans and the baselines.
- :mod:`planner.lab.sstable_layout`: a table's SSTables saved and put back between runs.
- :mod:`planner.lab.scratch_redis`: a scratch redis-server for benches and tests, stopped by
  its PID.

The load client's cgroups are :mod:`planner.loadgen.envelope`.
"""
