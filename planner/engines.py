"""The engines Kairos plans for: one definition, which every module that names them imports.

The first piece of issue 39 part 4's registry: today only the names; each engine's space,
model prior, collector, load client, executor playbook and gates are still found by
``engine == ...`` branches in the modules that own them.
"""

from __future__ import annotations

__all__ = ["ENGINES"]

#: Every engine, in the order the CLI lists them.
ENGINES: tuple[str, ...] = ("cassandra", "redis")
