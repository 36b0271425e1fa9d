"""DynamoDB faults injected at the botocore level, below PynamoDB and our lease code.

moto never throttles, never reports a ``TransactionConflict`` and never loses a response, so these
handlers play DynamoDB's part on the client's event hooks (botocore's documented extension point):

* :class:`DynamoFaults` — ``before-send``: by seeded chance, answer a request with HTTP 400
  ``ThrottlingException`` (any operation) or ``TransactionCanceledException`` whose reasons say
  ``TransactionConflict`` (``TransactWriteItems``, its faults taking the kinds in turn), or HTTP 503
  ``ServiceUnavailable``, instead of sending it. Nothing is written, as with
  the real service; botocore's own retry logic sees the answer like any other.
* :class:`LostResponses` — ``after-call``: the request reached moto and applied, then the response
  is "lost" (``ReadTimeoutError`` raised): the ambiguous failure a timeout after a write causes.

Both hook every botocore client our lease code uses in this process: the transaction connection
and each model's table connection.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import uuid
from collections import Counter

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

from leases.models import ALL_MODELS
from leases.dynamo import tx_connection

_JSON = "application/x-amz-json-1.0"
_TYPE = "com.amazonaws.dynamodb.v20120810#"


class _Body(bytes):
    def stream(self, **_: object):
        return iter([bytes(self)])


def dynamodb_clients() -> list:
    """Every botocore DynamoDB client the lease layer uses in this process."""
    clients = [tx_connection().client]
    clients += [model._get_connection().connection.client for model in ALL_MODELS]
    return clients


def _response(url: str, body: dict, status: int = 400) -> AWSResponse:
    headers = {"Content-Type": _JSON, "x-amzn-RequestId": uuid.uuid4().hex}
    return AWSResponse(url, status, headers, _Body(json.dumps(body).encode()))


def error_response(url: str, error_type: str, message: str) -> AWSResponse:
    """An HTTP 400 DynamoDB error answer of type ``error_type`` (e.g. ``AccessDeniedException``)."""
    return _response(url, {"__type": _TYPE + error_type, "message": message})


class DynamoFaults:
    """Fail a share ``rate`` of DynamoDB requests of this process (seeded), as a context manager.

    Args:
        rate: chance of a fault per request (0–1).
        seed: seed of the random generator.
        kinds: ``"throttle"`` and/or ``"conflict"``. A conflict only for ``TransactWriteItems``, whose
            faults take the kinds in turn (conflict first), so a few faulted transactions already
            show both; other operations get a throttle. Or ``("unavailable",)``: every fault an HTTP
            503 ``ServiceUnavailable``, as an outage answers.
        operations: operation names to touch (default: all).

    ``injected`` counts faults by kind; ``calls`` counts requests seen, by operation.
    """

    def __init__(self, *, rate: float, seed: int, kinds: tuple[str, ...] = ("throttle", "conflict"),
                 operations: set[str] | None = None) -> None:
        self.rate = rate
        self.kinds = kinds
        self.operations = operations
        self.injected: Counter = Counter()
        self.calls: Counter = Counter()
        self._random = random.Random(seed)
        self._transaction_kinds = itertools.cycle(sorted(kinds))  # "conflict" before "throttle"
        self._lock = threading.Lock()
        self._id = f"dynamo-faults-{uuid.uuid4().hex}"
        self._clients: list = []

    def _on_send(self, request, event_name: str, **_: object):
        operation = event_name.rsplit(".", 1)[-1]
        if self.operations is not None and operation not in self.operations:
            return None
        with self._lock:
            self.calls[operation] += 1
            if self._random.random() >= self.rate:
                return None
            kind = next(self._transaction_kinds) if operation == "TransactWriteItems" else "throttle"
            kind = "unavailable" if "unavailable" in self.kinds else kind
        if kind == "conflict" and operation == "TransactWriteItems":
            items = json.loads(request.body)["TransactItems"]
            reasons = [{"Code": "None"} for _ in items]
            reasons[0] = {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
            with self._lock:
                self.injected["conflict"] += 1
            return _response(request.url, {
                "__type": _TYPE + "TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for specific reasons "
                           f"[{', '.join(r['Code'] for r in reasons)}]",
                "CancellationReasons": reasons,
            })
        if kind == "unavailable":
            with self._lock:
                self.injected["unavailable"] += 1
            return _response(request.url, {"__type": _TYPE + "ServiceUnavailable", "message": "injected outage"}, 503)
        with self._lock:
            self.injected["throttle"] += 1
        return _response(request.url, {"__type": _TYPE + "ThrottlingException",
                                       "message": "Rate of requests exceeds the allowed throughput."})

    def install(self) -> "DynamoFaults":
        """Hook every lease-layer client of this process."""
        self._clients = dynamodb_clients()
        for client in self._clients:
            client.meta.events.register_first("before-send.dynamodb", self._on_send, unique_id=self._id)
        return self

    def uninstall(self) -> None:
        """Remove the hooks."""
        for client in self._clients:
            client.meta.events.unregister("before-send.dynamodb", unique_id=self._id)
        self._clients = []

    def __enter__(self) -> "DynamoFaults":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


class LostResponses:
    """Lose the response of the next ``times`` successful calls of ``operation`` (they applied)."""

    def __init__(self, operation: str, *, times: int = 1) -> None:
        self.operation = operation
        self.remaining = times
        self.lost = 0
        self._id = f"lost-responses-{uuid.uuid4().hex}"
        self._clients: list = []
        self._lock = threading.Lock()

    def _on_after_call(self, http_response, model, context=None, **_: object) -> None:
        if http_response.status_code >= 300:
            return
        with self._lock:
            if self.remaining <= 0:
                return
            self.remaining -= 1
            self.lost += 1
        raise ReadTimeoutError(endpoint_url=http_response.url)

    def install(self) -> "LostResponses":
        self._clients = dynamodb_clients()
        for client in self._clients:
            client.meta.events.register(f"after-call.dynamodb.{self.operation}", self._on_after_call,
                                        unique_id=self._id)
        return self

    def uninstall(self) -> None:
        for client in self._clients:
            client.meta.events.unregister(f"after-call.dynamodb.{self.operation}", unique_id=self._id)
        self._clients = []

    def __enter__(self) -> "LostResponses":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
