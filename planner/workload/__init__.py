"""What the cluster did: the workload series, the store that keeps them, and the collectors.

- :mod:`planner.workload.series`: time-stamped load and operation mix, validated where
  they enter, and the engines' operation classes.
- :mod:`planner.workload.store`: the embedded SQLite store of counter samples and gauges.
- :mod:`planner.workload.collect`: the collectors that read each node's counters.
- :mod:`planner.workload.resources`: each node's resource use, read where it runs.
- :mod:`planner.workload.traces`: synthetic traces in the shapes of SOPHIA's evaluation.
"""
