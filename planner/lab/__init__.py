"""Experiments on the lab: the payoff experiment, trace replays, saved SSTable layouts and the
load client's envelope.

- :mod:`planner.lab.payoff`: SOPHIA's payoff experiment, in minutes.
- :mod:`planner.lab.simulator`: a trace replayed under Kairos' plans and the baselines.
- :mod:`planner.lab.sstable_layout`: a table's SSTables saved and put back between runs.
- :mod:`planner.lab.envelope`: the load client's cgroups.
"""
