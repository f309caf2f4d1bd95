"""The closed loop (docs/autopilot.md).

- :mod:`planner.autopilot.decisions`: re-plan or not, apply the due step or not.
- :mod:`planner.autopilot.tick_inputs`: what one tick is given, read into ``TickInputs``.
- :mod:`planner.autopilot.learning`: the performance model learns from the windows it judges.
- :mod:`planner.autopilot.tick`: one engine's tick in one process.
"""
