"""Errors of the simulator's input."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload (spec file, history, command option) the simulator cannot run; the message names
    the field, the value and the rule, in one line."""
