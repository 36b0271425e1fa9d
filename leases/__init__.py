"""The DynamoDB lease layer: the scheduling core of docs/design.md §2–§4, in five verbs, each one
``TransactWriteItems`` and a public function: admit (:func:`leases.waiting.admit`: the one place a
job is created, with its idempotency token's claim; :func:`leases.waiting.withdraw` undoes it), acquire
(:func:`leases.transactions.acquire`; borrowing is one more condition on the cluster counter), park
(:func:`leases.waiting.park`), release (:func:`leases.transactions.fenced_release`: it hands the
place to the tenant's oldest waiting job, or frees it) and sweep (:func:`leases.sweeper.sweep`:
expire, then unblock with :func:`leases.waiting.wake`).

The job's states, every arrow named after the verb that makes it::

                                      give way: a copy to the back of the queue, once
                                          ┌────┐
                admit (room, none waiting)│    ▼                  release: commit
    submit ─────────────────────────────► QUEUED ───acquire───► RUNNING ───────────────► SUCCEEDED
      │                                   │  ▲  ▲  ▲              │  │  release: fail
      │                    park (cap hit) │  │  │  └─release: retry┘  └──────────────────► FAILED
      │                                   │  │  └──sweep: expire (its holder died)       (sweep: expire,
      │                                   ▼  │                                            no attempts left)
      └──admit (no room, or a line)────► WAITING
                                            release: commit or fail, handing its place on
                                            sweep: unblock (also the door, a cap change)

What each verb moves on the counters, the operators' moves and why the core is this small:
docs/design.md, "The scheduling core".
"""
