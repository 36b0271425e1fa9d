"""Our SQS transport: kombu's, with receives that survive an erroring or unreachable endpoint.

:mod:`tasks.config` selects it by URL scheme (``broker_url = "imposition-sqs://"``, an alias that
:func:`register` adds to kombu's transport table), not through Celery's ``broker_transport``, which
would also give the Redis events channel and Flower this transport. What it changes, nothing else:

* a receive whose answer is not a dict, or that kombu raised on while reading it, is a failed
  receive: no messages (kombu 5.7.0 turns a 408/5xx or unanswered receive into ``[]`` and then
  crashes on it: the upstream bug and its reproduction are in docs/design.md, "kombu's SQS transport
  and an erroring endpoint");
* while a queue's receives fail, the next one waits a bounded, jittered backoff
  (``sqs_receive_backoff_initial_s`` doubled per failure up to ``sqs_receive_backoff_max_s``);
* one WARNING line when a queue's receives begin to fail, one INFO line when they answer again;
* a predefined queue given without its ``url`` gets it from ``GetQueueUrl`` when the channel first
  needs it (:func:`imposition.common.aws.queue_url`), so the configuration is read without network;
* when its last consumer is cancelled, the channel reads every receive still open (at most
  ``sqs_wait_time_s`` + ``sqs_shutdown_receive_margin_s``) and releases what they bring; a message
  delivered but not acked when the channel closes, or rejected with ``requeue``, is made visible
  again (visibility 0) instead of copied; if SQS refuses both, left to its visibility timeout, the
  worker kept alive (docs/design.md, "Nothing lost when an endpoint or a process fails");
* each run of a queue's poll loop tells ``/healthz`` (:mod:`imposition.observability.health`) and,
  with ``poll_stamp_path`` set, touches that file (at most once a second, ``make run``'s supervisor);
* while the prefetch is full, the poll loop looks for room every ``sqs_prefetch_recheck_s`` (20 ms).

Publishing, acks and visibility changes use kombu's blocking boto3 client, unchanged.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from kombu.asynchronous.http import get_client
from kombu.transport import SQS, TRANSPORT_ALIASES
from vine.abstract import Thenable

from imposition.observability import health
from imposition.common import aws
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)

#: URL scheme of this transport (``imposition-sqs://``), registered by :func:`register`.
SCHEME = "imposition-sqs"


def register() -> str:
    """Add :data:`SCHEME` to kombu's transport aliases (idempotent, no I/O); returns the broker URL
    ``imposition-sqs://``."""
    TRANSPORT_ALIASES[SCHEME] = f"{__name__}:Transport"
    return f"{SCHEME}://"


@dataclass(frozen=True)
class ReceiveFailed:
    """The answer of a receive that kombu could not read: ``error`` is what it raised (None when
    vine's ``throw()`` came with no exception and none was being handled)."""

    error: BaseException | None

    def describe(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


def describe_answer(answer: object) -> str:
    """What a receive's non-dict answer says, for the log line that opens an outage."""
    if isinstance(answer, ReceiveFailed):
        return answer.describe()
    return "HTTP 408 or 5xx, or no answer (connection reset or refused, timeout)"


class ReceiveBackoff:
    """Pauses between failing receives: ``initial_s`` doubled per failure in a row, capped at
    ``max_s``, each drawn uniformly between half of that and all of it (seconds).

    Args:
        initial_s: the cap for the first failure, seconds (> 0).
        max_s: the largest cap, seconds (>= ``initial_s``).
        rng: the random source (tests pass a seeded one).

    Raises:
        ValueError: ``initial_s`` is not positive or ``max_s`` is below it.
    """

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        if not 0 < initial_s <= max_s:
            raise ValueError(f"need 0 < initial_s <= max_s, got initial_s={initial_s:g}, max_s={max_s:g}")
        self.initial_s = initial_s
        self.max_s = max_s
        self._rng = rng or random.Random()

    def cap_s(self, failures: int) -> float:
        """The largest pause after ``failures`` (>= 1) failed receives in a row, seconds."""
        return min(self.max_s, self.initial_s * 2 ** min(max(failures, 1) - 1, 62))

    def pause_s(self, failures: int) -> float:
        """The pause before the next receive after ``failures`` (>= 1) failed ones, seconds."""
        cap = self.cap_s(failures)
        return self._rng.uniform(cap / 2, cap)


@dataclass
class _Outage:
    began_at: float  # time.monotonic()
    failures: int


class _ReceiveAnswer:
    """The callback kombu's receive ends in, in front of ``on_answer``.

    An answer kombu read goes to ``on_answer`` as it is. One it raised on while reading (an HTTP
    error other than 408/5xx) goes to ``on_answer`` as :class:`ReceiveFailed`, instead of up through
    the event loop. vine calls :meth:`throw` for such an error; it calls it again when ``on_answer``
    itself raised, and that error is left alone: the promise that caught it raises it again.
    """

    def __init__(self, on_answer: Callable[[Any], Any], on_settled: Callable[[], None] | None = None) -> None:
        self._on_answer = on_answer
        self._on_settled = on_settled
        self._settled = False

    def _settle(self) -> None:
        if not self._settled:
            self._settled = True
            if self._on_settled is not None:
                self._on_settled()

    def __call__(self, answer: Any) -> Any:
        self._settle()
        return self._on_answer(answer)

    def throw(self, exc: BaseException | None = None, tb: object = None, propagate: bool = True) -> Any:
        if self._settled:
            return None
        self._settle()
        error = exc if exc is not None else sys.exc_info()[1]
        return self._on_answer(ReceiveFailed(error))

    def cancel(self) -> None:
        self._settle()


Thenable.register(_ReceiveAnswer)  # vine's transform() then uses it as it is, not wrapped in a promise


class PollStamp:
    """A file whose modification time says when the consumer's poll loop last ran; touched at
    most once per ``every_s`` seconds (a failure to touch it is logged once, never raised)."""

    def __init__(self, path: str, every_s: float = 1.0) -> None:
        self.path = path
        self.every_s = every_s
        self._last = float("-inf")
        self._warned = False

    def touch(self) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        try:
            with open(self.path, "a"):
                pass
            os.utime(self.path)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("could not touch the poll stamp %s: %s", self.path, exc)


class Channel(SQS.Channel):
    """kombu's SQS channel with failed receives read as "no messages", a bounded backoff while a
    queue's receives fail, and one log line per change between failing and answering.

    Transport options (from :mod:`tasks.config`; the settings' defaults otherwise):
    ``receive_backoff_initial_s`` and ``receive_backoff_max_s``, seconds (see
    :class:`ReceiveBackoff`); ``shutdown_receive_margin_s``, seconds (how much longer than the long
    poll a cancelled consumer waits for its open receives); ``prefetch_recheck_s``, seconds (how often
    a queue's poll loop looks for room while the prefetch is full: :meth:`_schedule_queue`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        settings = get_settings()
        options = self.transport_options
        self._backoff = ReceiveBackoff(
            float(options.get("receive_backoff_initial_s", settings.sqs_receive_backoff_initial_s)),
            float(options.get("receive_backoff_max_s", settings.sqs_receive_backoff_max_s)),
        )
        self._outages: dict[str, _Outage] = {}  # queue name → its receives failing since
        self._shutdown_margin_s = float(options.get("shutdown_receive_margin_s",
                                                    settings.sqs_shutdown_receive_margin_s))
        self._open_receives = 0  # long polls sent and not answered yet
        self._poll_stamp = PollStamp(settings.poll_stamp_path) if settings.poll_stamp_path else None
        self._prefetch_recheck_s = float(options.get("prefetch_recheck_s", settings.sqs_prefetch_recheck_s))

    def _new_boto_client(self, service: str, region: str, access_key_id: str | None, secret_access_key: str | None,
                         session_token: str | None = None, config: Config | None = None) -> Any:
        """kombu 5.7's ``Channel._new_boto_client`` (same session, endpoint and config), with the
        session on the process's parsed service models (:func:`imposition.common.aws.new_botocore_session`):
        kombu makes one per queue, and each parsed the SQS model again (0.1–0.2 s of CPU per queue,
        in every pool child)."""
        session = boto3.Session(region_name=region, aws_access_key_id=access_key_id,
                                aws_secret_access_key=secret_access_key, aws_session_token=session_token,
                                botocore_session=aws.new_botocore_session())
        client_kwargs: dict[str, Any] = {"use_ssl": self.is_secure if self.is_secure is not None else True}
        if self.endpoint_url is not None:
            client_kwargs["endpoint_url"] = self.endpoint_url
        client_config = Config(**(self.transport_options.get("client-config") or {}))
        if config is not None:
            client_config = client_config.merge(config)
        return session.client(service, config=client_config, **client_kwargs)

    def _schedule_queue(self, queue):
        """kombu's poll loop step (receive if the prefetch has room), except that while the prefetch
        is full the next look for room is a timer of ``prefetch_recheck_s`` (:meth:`_look_for_room`)
        instead of kombu's ``call_soon``.

        Why: Celery acks through ``hub.call_soon`` too (``Consumer.call_soon_ack``, kombu 5.7 /
        Celery 5.7). When a task ends, its ack and this loop's pending look are queued together; if
        the look runs first it finds the prefetch still full and queues itself again, and the event
        loop then sleeps in ``poll`` until a file descriptor or a timer wakes it (kombu's curl
        client checks its requests every second): the slot the ack freed stayed idle up to 1 s with
        messages waiting (``make bench-sched``, a chain's end in ``heavy3``; docs/design.md, "A freed
        slot receives at once"). With the timer the look follows the ack within about
        ``prefetch_recheck_s``."""
        health.poll_turned()
        if self._poll_stamp is not None:
            self._poll_stamp.touch()
        if self._prefetch_recheck_s > 0 and queue in self._active_queues and not self.qos.can_consume():
            self.hub.call_later(self._prefetch_recheck_s, self._look_for_room, queue)
            return None
        return super()._schedule_queue(queue)

    def _look_for_room(self, queue):
        """A timer's step of the poll loop (:meth:`_schedule_queue`: the look for room, and the next
        poll after a failed receive's backoff). The event loop logs any error of a timer but
        the ones it propagates (the connection's, which restart the consumer, as kombu's own loop
        would) and forgets it, which would end this queue's loop for good with the worker up: an
        error while sending the receive (a request that could not be signed, say) is therefore read
        as a failed receive here, and the queue polls again after the receive backoff."""
        try:
            self._schedule_queue(queue)
        except self.hub.propagate_errors:
            raise
        except Exception as exc:  # noqa: BLE001 - the loop must go on; one warning opens the outage
            self._receive_failed(queue, ReceiveFailed(exc))
            self._loop1(queue)

    @cached_property
    def predefined_queues(self) -> dict[str, dict]:
        """kombu's map of queue name to settings, with each missing ``url`` looked up (once per process).

        Raises:
            botocore.exceptions.ClientError: ``NonExistentQueue`` for a queue never provisioned.
            ConnectionError: SQS answered 5xx or throttled, or could not be reached: a connection
                error to kombu, which retries the connection with backoff (a ``ClientError`` would
                end beat or a worker whose channel is first made during an outage).
        """
        queues = {}
        for name, q in self.transport_options.get("predefined_queues", {}).items():
            try:
                queues[name] = q if q.get("url") else {**q, "url": aws.queue_url(name)}
            except ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
                code = exc.response.get("Error", {}).get("Code", "")
                if int(status) < 500 and "Throttl" not in code and code != "RequestThrottled":
                    raise
                raise ConnectionError(f"SQS answered {code or status} looking up queue {name}: {exc}") from exc
        return queues

    def _get_from_sqs(self, queue_name, queue_url, connection, count=1, callback=None):
        self._open_receives += 1
        answer = _ReceiveAnswer(callback, on_settled=self._receive_settled)
        try:
            return super()._get_from_sqs(queue_name, queue_url, connection, count=count, callback=answer)
        except BaseException:
            answer.cancel()
            raise

    def _receive_settled(self) -> None:
        self._open_receives -= 1

    # -- a clean stop: nothing received is left hidden ------------------------------------------

    def basic_cancel(self, consumer_tag):
        result = super().basic_cancel(consumer_tag)
        if not self._consumers and self._open_receives > 0:
            self.finish_open_receives()
        return result

    def finish_open_receives(self) -> int:
        """Read the answers of the receives still open, for at most the long poll plus
        ``shutdown_receive_margin_s``; returns how many are still open after that (0 normally).

        Drives kombu's curl client directly (not the event loop, which may have stopped already):
        each answer runs its callbacks, and a queue with no consumer left has what it brought
        released by kombu (``Channel._release_messages``: visibility 0).
        """
        # kombu's curl client, read through its private ``_multi`` and ``_timeout_check`` (no stub has them)
        client: Any = get_client(self.hub) if self.hub is not None else None
        multi = getattr(client, "_multi", None)
        if multi is None or getattr(client, "_closed", True):
            return self._open_receives
        wait_s = self.wait_time_seconds + self._shutdown_margin_s
        log.info("consumers cancelled with %d SQS receive(s) open; reading their answers (up to %g s) to "
                 "release what they bring", self._open_receives, wait_s)
        deadline = time.monotonic() + wait_s
        while self._open_receives > 0 and time.monotonic() < deadline:
            multi.select(min(0.25, max(0.0, deadline - time.monotonic())))
            client._timeout_check()  # performs every socket, then runs the answers' callbacks
        if self._open_receives > 0:
            log.warning("%d SQS receive(s) still open after %g s: a message they bring stays hidden until its "
                        "visibility timeout", self._open_receives, wait_s)
        return self._open_receives

    def _restore(self, message, unwanted_delivery_info=("sqs_message", "sqs_queue")):
        """Give a delivered, unacked message back to the queue: its visibility set to 0 (a copy only
        if that fails, as kombu does)."""
        info = message.delivery_info
        sqs_message, queue_url = info.get("sqs_message"), info.get("sqs_queue")
        if sqs_message and queue_url:
            queue = self.canonical_queue_name(info["routing_key"]) if info.get("routing_key") else None
            try:
                self._new_release_client(self.sqs(queue=queue)).change_message_visibility(
                    QueueUrl=queue_url, ReceiptHandle=sqs_message["ReceiptHandle"], VisibilityTimeout=0)
                log.info("released an unstarted message of queue %s (visibility 0)", queue or queue_url)
                return None
            except (BotoCoreError, ClientError, OSError) as exc:
                log.warning("could not release a message of queue %s (%s); publishing a copy instead",
                            queue or queue_url, exc)
        try:
            return super()._restore(message, unwanted_delivery_info)
        except (BotoCoreError, ClientError, OSError) as exc:
            # SQS failing both ways (an outage): the original is still in the queue, hidden, and comes
            # back at its visibility timeout. Raising would end the worker (kombu's reject_log_error
            # catches only connection errors: "Unrecoverable error").
            log.error("could not publish a copy of a message of queue %s either (%s); it is visible again at its "
                      "visibility timeout", info.get("routing_key") or queue_url, exc)
            return None

    def _on_messages_ready(self, queue, qname, messages):
        # kombu's names: ``queue`` is the queue's URL, ``qname`` its name.
        if not isinstance(messages, dict):
            self._receive_failed(qname, messages)
            return 0
        self._receive_answered(qname)
        return super()._on_messages_ready(queue, qname, messages)

    def _loop1(self, queue, messages_fetched=None):
        outage = self._outages.get(queue)
        if outage is None:
            return super()._loop1(queue, messages_fetched)
        self.hub.call_later(self._backoff.pause_s(outage.failures), self._look_for_room, queue)
        return None

    def _receive_failed(self, queue: str, answer: object) -> None:
        outage = self._outages.get(queue)
        if outage is None:
            self._outages[queue] = _Outage(began_at=time.monotonic(), failures=1)
            log.warning("SQS receive from queue %s failing (%s); receiving again with backoff up to %g s",
                        queue, describe_answer(answer), self._backoff.max_s)
        else:
            outage.failures += 1

    def _receive_answered(self, queue: str) -> None:
        outage = self._outages.pop(queue, None)
        if outage is not None:
            log.info("SQS receive from queue %s answering again after %.1f s and %d failed receive(s)",
                     queue, time.monotonic() - outage.began_at, outage.failures)


class Transport(SQS.Transport):
    """kombu's SQS transport with :class:`Channel`."""

    Channel = Channel
