"""The ``imposition`` command: the top layer of the installed service.

``main`` (the command group), ``provision`` (queues, tables, bucket), ``jobs``, ``dlq``, ``tenants``
and ``audit`` (operator commands). Nothing in the service imports this package.
"""
