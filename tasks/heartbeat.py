"""The heartbeat: keeps a lease and its SQS message alive while a job runs (DESIGN §4).

A daemon thread wakes every ``heartbeat_interval_s`` and

1. renews the lease (``expires_at = now + lease_ttl_s``), conditional on its fencing token;
2. extends the message's visibility to the derived visibility timeout, so SQS does not redeliver a
   message whose job is still running (a failure here is logged, never fatal: the lease, not the
   message, is the source of truth).

It declares the lease **lost**, sets :attr:`Heartbeat.lost` and stops when

* a renewal is refused (the token is gone: the sweeper reclaimed the lease), or
* no renewal succeeded for ``lease_lost_after_s`` (half the TTL): the worker cannot prove it still
  holds the slot, so it stops before anyone else could take it over.

An ambiguous renewal (a timeout or dropped connection after the write may have applied) re-reads
the lease before deciding. The job watches :attr:`lost` (the engine gets it as its cancel event)
and commits nothing once it is set.
"""

from __future__ import annotations

import logging
import threading
import time

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from leases.errors import LeaseLost
from leases.transactions import Lease, renew, still_held
from service import aws
from service.clocks import Clocks

log = logging.getLogger(__name__)


class Heartbeat:
    """Renews ``lease`` on a timer until stopped or lost. Use as a context manager.

    Args:
        lease: the lease just acquired.
        clocks: the clocks (interval, TTL, visibility timeout).
        queue_url: the SQS queue the job's message came from, or None (not from SQS).
        receipt_handle: that message's receipt handle, or None.
    """

    def __init__(
        self,
        lease: Lease,
        clocks: Clocks,
        *,
        queue_url: str | None = None,
        receipt_handle: str | None = None,
    ) -> None:
        self.lease = lease
        self.clocks = clocks
        self.queue_url = queue_url
        self.receipt_handle = receipt_handle
        #: Set once the lease is known or presumed lost; the engine's cancel event.
        self.lost = threading.Event()
        self.lost_detail = ""
        self.beats = 0
        self.last_renewed_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{lease.job_id}", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "Heartbeat":
        """Start the timer thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating (the lease is kept as it is) and wait for the thread."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.clocks.heartbeat_interval_s + 30)

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the beat ------------------------------------------------------------------------------

    def _declare_lost(self, detail: str) -> None:
        if not self.lost.is_set():
            self.lost_detail = detail
            self.lost.set()
            log.warning("lease on job %s lost: %s", self.lease.job_id, detail)
        self._stop.set()

    def _run(self) -> None:
        interval = self.clocks.heartbeat_interval_s
        while not self._stop.wait(interval):
            self.beat()
            if self.lost.is_set():
                return

    def beat(self) -> None:
        """Renew once (lease, then message visibility); may declare the lease lost."""
        try:
            self.lease = renew(self.lease)
        except LeaseLost as exc:
            self._declare_lost(str(exc))
            return
        except (PynamoDBException, BotoCoreError, ClientError, OSError) as exc:
            # Ambiguous: the write may have applied. Re-read before deciding anything.
            log.warning("heartbeat of job %s failed (%s); re-reading the lease", self.lease.job_id, exc)
            try:
                if not still_held(self.lease):
                    self._declare_lost(f"token gone after an ambiguous renewal ({exc})")
                    return
            except (PynamoDBException, BotoCoreError, ClientError, OSError) as exc2:
                log.warning("could not re-read the lease of job %s: %s", self.lease.job_id, exc2)
            if time.monotonic() - self.last_renewed_at > self.clocks.lease_lost_after_s:
                self._declare_lost(
                    f"no successful renewal for {self.clocks.lease_lost_after_s:g} s (half the lease TTL)"
                )
            return
        self.last_renewed_at = time.monotonic()
        self.beats += 1
        self._extend_visibility()

    def _extend_visibility(self) -> None:
        if not (self.queue_url and self.receipt_handle):
            return
        try:
            aws.sqs().change_message_visibility(
                QueueUrl=self.queue_url,
                ReceiptHandle=self.receipt_handle,
                VisibilityTimeout=self.clocks.visibility_timeout_s,
            )
        except (BotoCoreError, ClientError) as exc:
            log.warning("could not extend visibility of job %s's message: %s", self.lease.job_id, exc)
