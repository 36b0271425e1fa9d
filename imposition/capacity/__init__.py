"""Capacity planning that predicts: a discrete-event simulator of the service's own scheduling.

:mod:`imposition.capacity.core` (the lease layer's decisions on counters in memory, through
:mod:`leases.policy`), :mod:`imposition.capacity.simulator` (SimPy: arrivals, SQS, worker slots, clocks),
:mod:`imposition.capacity.workload` (spec files and history), :mod:`imposition.capacity.results` (waits, utilisation,
the licence conditions), :mod:`imposition.capacity.cli` (``imposition simulate``).
"""
