"""``make soak``: the lease layer under sustained load and random SIGKILLs (not part of ``make test``).

See :mod:`soak.__main__` for what runs and what is checked.
"""
