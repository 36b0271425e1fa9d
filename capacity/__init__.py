"""Capacity planning that predicts: a discrete-event simulator of the service's own scheduling.

:mod:`capacity.core` (the lease layer's decisions on counters in memory, through
:mod:`leases.policy`), :mod:`capacity.simulator` (SimPy: arrivals, SQS, worker slots, clocks),
:mod:`capacity.workload` (spec files and history), :mod:`capacity.results` (waits, utilisation,
the licence conditions), :mod:`capacity.cli` (``imposition simulate``).
"""
