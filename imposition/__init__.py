"""Fair, multi-tenant PDF imposition: everything of the service but the Celery side and the leases.

Subpackages, bottom layer first (imports point down; ``lint-imports`` keeps them so):

* ``common``: settings, clocks, AWS and Redis clients, tenancy names.
* ``engine``: layouts, page orders, geometry, marks and the two engines.
* ``admission``: the tenant side of fairness at the door.
* ``observability``, ``webhooks``: metrics, events, alerts; tenant notifications.
* ``capacity``: the simulator and the capacity report.
* ``cli``: the ``imposition`` command.

:mod:`leases` (the DynamoDB lease layer) and :mod:`tasks` (the Celery app and tasks) sit beside this
package. Nothing here does I/O at import.
"""
