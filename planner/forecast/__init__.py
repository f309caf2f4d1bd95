"""What the workload will do: forecasts of load and operation mix with prediction intervals.

- :mod:`planner.forecast.forecaster`: ``forecast`` and ``backtest``, what ``kairos
  forecast`` and the planner call.
- :mod:`planner.forecast.ensemble`: the backtest-driven ensemble behind ``--model auto``.
- :mod:`planner.forecast.candidates`: its cheap candidates, vectorised over origins.
- :mod:`planner.forecast.models`: the single models behind ``--model NAME``.
- :mod:`planner.forecast.intervals`: the split-conformal bands.
- :mod:`planner.forecast.results`: the forecast and backtest values and their file.
"""
