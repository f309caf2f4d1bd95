"""Which nodes may be down together: the ring, the inventory that describes it, the batches.

- :mod:`planner.topology.ring`: ring topology, replica sets, what a consistency level needs,
  and whether one batch is safe.
- :mod:`planner.topology.batching`: the fewest safe restart batches, and why each is safe.
- :mod:`planner.topology.inventory`: the hosts of an Ansible inventory as a ring.
- :mod:`planner.topology.batch_search`: fewer safe batches (branch and bound, tabu).
- :mod:`planner.topology.batch_safety`: every batch of a plan checked on a ring.
"""
