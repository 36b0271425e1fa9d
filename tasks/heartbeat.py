"""The heartbeat: keeps a lease and its SQS message alive while a job runs (docs/design.md §4).

Three daemon threads per job:

* the **beat** renews the lease every ``heartbeat_interval_s`` (:func:`leases.renewal.renew`,
  fenced; throttling retried in place, an ambiguous renewal read back);
* the **visibility** thread extends the message's visibility after each confirmed renewal, on its
  own so that an SQS call that hangs or retries cannot delay a renewal (an SQS outage must not cost
  a running job its lease); a failure is logged, never fatal: the lease is the source of truth;
* the **watchdog** declares the lease lost once its known ``expires_at`` is less than half a TTL
  away, apart from the beat, so a hanging renewal cannot keep a job running past it.

:attr:`Heartbeat.lost` is set, and the threads stop, when a renewal is refused or the read-back
shows the token gone (the sweeper reclaimed the lease), or when the watchdog's deadline passes.
:attr:`Heartbeat.lost_cause` says which: ``fenced`` (refused), ``infra_lost`` (renewals failed or
hung: DynamoDB could not be reached; not charged as an attempt) or ``stalled`` (no renewal tried:
the process itself did not run, e.g. SIGSTOP; charged). The job watches :attr:`lost` (the engine's
cancel event) and commits nothing once it is set; every commit is fenced by the token anyway.

Each confirmed renewal (and the acquire) is also recorded for the node's ``/healthz``
(:func:`imposition.observability.health.renewed`), and cleared when the heartbeat stops.
"""

from __future__ import annotations

import logging
import threading
import time

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException

from leases.errors import LeaseError, LeaseLost
from leases.transactions import Lease
from leases.renewal import renew
from imposition.common import aws
from imposition.common.clocks import Clocks
from imposition.observability import health

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
        #: Why the lease was lost: ``fenced``, ``infra_lost`` or ``stalled`` (module docstring); "" while held.
        self.lost_cause = ""
        #: Renewals in a row that failed to reach DynamoDB (0 after a confirmed one), and whether one
        #: is in flight now.
        self.failed_renewals = 0
        self._renewing = False
        #: Confirmed renewals so far.
        self.beats = 0
        #: Visibility extensions that reached SQS so far.
        self.extensions = 0
        self._stop = threading.Event()
        self._extension_due = threading.Event()
        name = f"heartbeat-{lease.job_id}"
        self._threads = (
            threading.Thread(target=self._beat_loop, name=name, daemon=True),
            threading.Thread(target=self._watch_loop, name=f"{name}-watchdog", daemon=True),
        )
        self._visibility_thread = threading.Thread(target=self._visibility_loop, name=f"{name}-visibility",
                                                   daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def deadline_at(self) -> float:
        """Epoch seconds at which the watchdog declares the lease lost: half a TTL before expiry."""
        return self.lease.expires_at - self.clocks.lease_ttl_s + self.clocks.lease_lost_after_s

    def start(self) -> "Heartbeat":
        """Start the beat, the watchdog and the visibility thread; returns self."""
        health.renewed(self.lease.job_id, self.lease.expires_at - self.clocks.lease_ttl_s)
        for thread in self._threads:
            thread.start()
        if self.queue_url and self.receipt_handle:
            self._visibility_thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and watching (the lease is kept as it is) and wait for the beat thread.

        A renewal in flight is not interrupted; the wait for it is bounded by one interval plus
        the SDK's timeouts. A visibility extension in flight is not waited for: it ends on its
        own (an extension after the message was deleted is refused by SQS and logged).
        """
        self._stop.set()
        self._extension_due.set()  # wakes the visibility thread, which sees the stop
        for thread in self._threads:
            if thread.is_alive() and threading.current_thread() is not thread:
                thread.join(timeout=self.clocks.heartbeat_interval_s + 30)
        health.ended(self.lease.job_id)

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the beat ------------------------------------------------------------------------------

    def _declare_lost(self, detail: str, cause: str) -> None:
        if not self.lost.is_set():
            self.lost_detail = detail
            self.lost_cause = cause
            self.lost.set()
            log.warning("lease on job %s lost: %s", self.lease.job_id, detail)
        self._stop.set()

    def _beat_loop(self) -> None:
        # The first beat is due one interval after the lease was written, not after this thread
        # started: a slow acquire or job read must not eat into the half TTL the watchdog allows.
        renewed_at = self.lease.expires_at - self.clocks.lease_ttl_s
        wait_s = max(0.0, renewed_at + self.clocks.heartbeat_interval_s - time.time())
        while not self._stop.wait(wait_s):
            self.beat()
            wait_s = self.clocks.heartbeat_interval_s

    def _watch_loop(self) -> None:
        while True:
            remaining_s = self.deadline_at - time.time()
            if remaining_s <= 0:
                unreachable = self.failed_renewals > 0 or self._renewing
                self._declare_lost(
                    f"no confirmed renewal for {self.clocks.lease_lost_after_s:g} s (half the lease TTL)"
                    + (f"; {self.failed_renewals} renewal(s) failed to reach DynamoDB" if unreachable else ""),
                    "infra_lost" if unreachable else "stalled",
                )
                return
            if self._stop.wait(min(remaining_s, self.clocks.heartbeat_interval_s)):
                return

    def beat(self) -> None:
        """Renew once (lease, then message visibility); may declare the lease lost."""
        known_expiry_at = self.lease.expires_at
        self._renewing = True
        try:
            self.lease = renew(self.lease)
        except LeaseLost as exc:
            self._declare_lost(str(exc), "fenced")
            return
        except (LeaseError, PynamoDBException, BotoCoreError, ClientError, OSError) as exc:
            # Unresolved (throttled throughout, or the read-back failed too): the lease keeps its
            # last known expiry and the watchdog decides when that is too close.
            self.failed_renewals += 1
            log.warning("heartbeat of job %s failed (%s); %.1f s to the lease-lost deadline",
                        self.lease.job_id, exc, self.deadline_at - time.time())
            return
        finally:
            self._renewing = False
        self.failed_renewals = 0
        if self._stop.is_set() or self.lease.expires_at <= known_expiry_at:
            return  # stopped meanwhile, or an ambiguous renewal that (read back) did not apply
        self.beats += 1
        health.renewed(self.lease.job_id, self.lease.expires_at - self.clocks.lease_ttl_s)
        self._extension_due.set()  # extensions due while one hangs coalesce into one

    def _visibility_loop(self) -> None:
        while True:
            self._extension_due.wait()
            if self._stop.is_set():
                return
            self._extension_due.clear()
            try:
                aws.sqs().change_message_visibility(
                    QueueUrl=self.queue_url,
                    ReceiptHandle=self.receipt_handle,
                    VisibilityTimeout=self.clocks.visibility_timeout_s,
                )
            except (BotoCoreError, ClientError) as exc:
                if not self._stop.is_set():
                    log.warning("could not extend visibility of job %s's message: %s", self.lease.job_id, exc)
            else:
                self.extensions += 1
