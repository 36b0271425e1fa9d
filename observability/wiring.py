"""Imported by :mod:`tasks` (so by every worker, beat, Flower and publisher process): connects the
metric receivers, the worker's exporter hooks and the publishers' ``task-sent`` events, and
registers the sampler task. Importing is all it takes; nothing here is called.
"""

from observability import events, exporter, metrics, sampler

__all__ = ["events", "exporter", "metrics", "sampler"]
