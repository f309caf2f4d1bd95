"""Kairos planner: forecast the workload, model each configuration, plan reconfigurations."""

__version__ = "0.1.0"
