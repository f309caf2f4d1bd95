"""What a configuration does and what changing it costs, learnt on the user's own cluster.

- :mod:`planner.model.spaces`: each engine's configuration space as data.
- :mod:`planner.model.performance`: workload mix and configuration -> throughput.
- :mod:`planner.model.tuner`: the best static configuration for one mix.
- :mod:`planner.model.memory_split`: a node's memory split as a decision.
- :mod:`planner.model.durability`: Redis durability and the floor no plan goes below.
- :mod:`planner.model.restart_impact` and :mod:`planner.model.change_cost`: what a restart
  or a rewriting change costs, measured under load.
"""
