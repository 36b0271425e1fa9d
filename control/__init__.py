"""The top layer: everything wired together for a person to run.

``cli`` (the ``imposition`` command), ``provision`` (queues, tables, bucket), ``jobs``, ``dlq``,
``tenants`` and ``audit`` (operator commands), ``demo`` (``make run``). Nothing imports this package
but the tests, the benchmarks and the soak.
"""
