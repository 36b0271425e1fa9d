"""The DynamoDB lease layer: the scheduling core of docs/design.md §2–§4, in five verbs.

Each verb is one ``TransactWriteItems`` on the job, its tenant's counters and the cluster's slot
counter, and a public function here:

* **admit** (:func:`leases.waiting.admit`, at submission): take a place (``queued``) if the tenant
  has room and nobody waits, else block (``waiting``, no message);
* **acquire** (:func:`leases.transactions.acquire`): the fenced lease, on condition the tenant's
  leases are below its cap; **borrowing** is the same verb with one more condition, on the cluster
  counter (busy slots below live slots − the reserve), up to the tier's burst cap;
* **park** (:func:`leases.waiting.park`, on a cap hit): ``queued → waiting``, on condition the cap
  is still full (a slot freed meanwhile cancels the park, and the worker acquires again);
* **release** (:func:`leases.transactions.fenced_release`: ``commit_success``, ``fail_job``,
  ``release_for_retry``): fenced by the lease's token; frees the slot, and hands the tenant's place
  to its oldest waiting job in the same transaction, or frees the place (a retry keeps it);
* **sweep** (:func:`leases.sweeper.sweep`): expire (a lease nobody renewed is released by the
  sweeper), then unblock (:func:`leases.waiting.wake`: a waiting job of a tenant with room; the
  door and a cap change unblock the same way; :func:`leases.waiting.wake_borrowers` for a tier
  that borrows, after each release).

The job's states, every arrow named after the verb that makes it::

                admit (room, none waiting)                        release: commit
    submit ─────────────────────────────► QUEUED ───acquire───► RUNNING ───────────────► SUCCEEDED
      │                                   │  ▲  ▲  ▲              │  │  release: fail
      │                    park (cap hit) │  │  │  └─release: retry┘  └──────────────────► FAILED
      │                                   │  │  └──sweep: expire (its holder died)       (sweep: expire,
      │                                   ▼  │                                            no attempts left)
      └──admit (no room, or a line)────► WAITING
                                            release: commit or fail, handing its place on
                                            sweep: unblock (also the door, a cap change)

The slot and the place (``occupied`` = in_flight + queued: jobs running or on their way)::

    verb      tenant item                                   cluster   what moves
    admit     queued+1 occupied+1  |  waiting+1              -        takes a place | blocks
    acquire   in_flight+1 queued−1                           busy+1   takes a slot
    park      queued−1 occupied−1 waiting+1                  -        gives its place up
    release   in_flight−1; handed: waiting−1 queued+1;       busy−1   frees the slot; the place passes
              freed: occupied−1; retry: queued+1                      on, is freed, or is kept
    sweep     expire: as release (retry, or fail);           busy−1   the dead holder's slot
              unblock: waiting−1 queued+1 occupied+1         -        a place, where there is room

Operators' moves outside the picture's flow, each one transaction too: ``cancel`` and ``retry`` of
a job (:mod:`leases.lifecycle`), a cap change (:mod:`leases.tenants`, followed by unblock), a
counter repair (:mod:`leases.audit`). The design, and why it is this small: docs/design.md,
"The scheduling core".
"""
