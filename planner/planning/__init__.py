"""When to change, and to what: the pipeline that makes a plan, and the plan as people read it.

- :mod:`planner.planning.pipeline`: forecast -> performance model -> cost/benefit ->
  optimiser -> plan (what ``kairos plan`` runs).
- :mod:`planner.planning.costbenefit`: a plan's gain against its switching costs.
- :mod:`planner.planning.optimiser`: the genetic algorithm, the exact DP and the baselines.
- :mod:`planner.planning.risk`: scenarios, risk-adjusted problems and P(gain > cost).
- :mod:`planner.planning.capacity`: capacity advice.
- :mod:`planner.planning.explain`: a plan as people read it.

The plan file itself, the contract with the executor, is :mod:`planner.plan`.
"""
