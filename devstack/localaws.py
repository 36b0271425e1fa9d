"""The embedded local AWS endpoint: moto's server mode on 127.0.0.1, for ``make run`` and tests.

Two moto server processes, each on a free port:

* the **main endpoint** (threaded) serves SQS and S3 (``AWS_ENDPOINT_URL``); SQS long polls block a
  request thread, so it must be threaded;
* the **DynamoDB endpoint** runs one request at a time in moto (``AWS_ENDPOINT_URL_DYNAMODB``).
  moto's threaded server checks a ``TransactWriteItems`` condition and then writes without a lock,
  so two concurrent transactions can interleave and break a cap that real DynamoDB would keep;
  serialising requests restores DynamoDB's isolation. Each request is still read on a thread of
  its own, whole, before it takes its turn (:func:`serialized`): a client stopped mid-request
  (SIGSTOP) held a single-threaded server for every other client. It counts the seconds it was
  busy (``GET /_local/busy``, :func:`endpoint_busy`).

Run one server by hand with ``python -m devstack.localaws [--single-threaded] [--iam] [--port N]``: it
prints ``listening on <port>`` once it accepts connections. ``--iam`` makes a server whose IAM
enforcement (off until ``POST /moto-api/reset-auth 0``, moto's ``INITIAL_NO_AUTH_ACTION_COUNT``)
checks DynamoDB, KMS and CloudWatch requests per resource as AWS does
(:func:`resource_level_authorization`): tests/integration/test_stack_iam.py runs the roles of the
CloudFormation template on one.

Its global indexes may lag behind the tables, as AWS's may (``--gsi-lag-s``, :func:`set_gsi_lag`).

Both forget moto's DynamoDB model copies after each request; transactions roll back item by item
(docs/design.md, "Known limits of the local stack").
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO


def _exit_with_parent(parent_pid: int, interval_s: float = 1.0) -> None:
    """End this server when the process that started it is gone (even if it was SIGKILLed and could
    not stop us): a local endpoint must never outlive its run."""
    def watch() -> None:
        while True:
            time.sleep(interval_s)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def forgetting_copies(app):
    """Wrap the WSGI ``app`` so that after each request the instances moto tracks for its dashboard
    (``instances_tracked`` of each DynamoDB model class) are forgotten; the tables themselves are
    untouched."""
    from moto.core.model_instances import model_data

    def wrapped(environ, start_response):
        try:
            return app(environ, start_response)
        finally:
            for model in model_data["dynamodb"].values():
                model.instances_tracked = []  # moto's class attribute (InstanceTrackerMeta)

    return wrapped


def item_level_transaction_rollback() -> None:
    """Make moto's ``TransactWriteItems`` keep only the items it touches for its rollback.

    moto 5.2 deep-copies every table a transaction names before applying it, and puts the copies
    back if it is cancelled: each lease transaction copied the whole jobs table, so the local
    endpoint slowed down as jobs accumulated (a transaction's cost grew with the table, not with the
    transaction). Here the backend's ``copy`` module is swapped, for the call, for one whose
    ``deepcopy`` leaves tables alone; the touched items are copied beforehand and, if the
    transaction is cancelled or refused, put back (or removed, if they did not exist). Indexes
    follow, since moto reads them from the items. For the single-threaded DynamoDB server only.
    """
    import copy
    import types

    from moto.dynamodb import models as backend_module
    from moto.dynamodb.models.table import Table

    def keep_tables(obj, memo=None):
        return obj if isinstance(obj, Table) else copy.deepcopy(obj, memo)

    no_table_copies = types.SimpleNamespace(deepcopy=keep_tables, copy=copy.copy)
    original = backend_module.DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        touched = []
        for entry in transact_items:
            op = next(iter(entry.values()))
            table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            key = (op.get("Item") if "Put" in entry else op.get("Key")) if table is not None else None
            if table is None or not key or table.hash_key_attr not in key:
                continue  # moto refuses it itself, before anything applies
            if table.range_key_attr is not None and table.range_key_attr not in key:
                continue
            hash_value, range_value = self.get_keys_value(table, key)
            touched.append((table, hash_value, range_value, copy.deepcopy(table.get_item(hash_value, range_value))))
        backend_module.copy = no_table_copies
        try:
            return original(self, transact_items)
        except BaseException:
            for table, hash_value, range_value, before in reversed(touched):
                if before is None:
                    table.delete_item(hash_value, range_value)
                elif range_value is not None:
                    table.items[hash_value][range_value] = before
                else:
                    table.items[hash_value] = before
            raise
        finally:
            backend_module.copy = copy

    backend_module.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]  # moto's method, replaced in this server process only


#: Path that sets the DynamoDB endpoint's index lag at run time (:class:`IndexLag`, :func:`set_gsi_lag`).
GSI_LAG_PATH = "/_local/gsi-lag"
#: The operations after which :class:`IndexLag` records what the tables hold.
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem", "CreateTable",
                     "DeleteTable"})


class IndexLag:
    """Make a global secondary index show its table as it was ``lag_s`` seconds ago, as real
    DynamoDB's eventually consistent indexes may; moto's show every write at once.

    After each write request it records a copy of every item of every table (only while
    ``lag_s > 0``: a cost for tests, never for benchmarks that leave it off); a ``Query`` on a global
    index then runs on the newest copy at least ``lag_s`` old (before the first copy: the first).
    Base-table reads, strongly consistent or not, stay current. For the single-threaded server,
    whose requests run one at a time."""

    def __init__(self, lag_s: float = 0.0) -> None:
        self.lag_s = 0.0
        self._copies: list[tuple[float, dict[int, list]]] = []
        self.set(lag_s)

    def set(self, lag_s: float) -> None:
        """Set the lag (seconds, >= 0); a new lag starts from the tables as they are now."""
        if lag_s < 0:
            raise ValueError(f"gsi lag_s={lag_s}: must be >= 0")
        self.lag_s = float(lag_s)
        self._copies = []
        if self.lag_s > 0:
            self.record()

    def record(self) -> None:
        """Keep a copy of every table's items, and drop the copies no view needs any more."""
        if self.lag_s <= 0:
            return
        import copy  # noqa: PLC0415 - only while a lag is set

        now = time.time()
        self._copies.append((now, {id(t): copy.deepcopy(t.all_items()) for t in _tables()}))
        cutoff = now - self.lag_s
        while len(self._copies) > 1 and self._copies[1][0] <= cutoff:
            self._copies.pop(0)

    def view(self, table) -> list | None:
        """``table``'s items as its global indexes show them now, or None (no lag)."""
        if self.lag_s <= 0 or not self._copies:
            return None
        cutoff = time.time() - self.lag_s
        seen = [items for t, items in self._copies if t <= cutoff] or [self._copies[0][1]]
        return seen[-1].get(id(table), [])


def _tables() -> list:
    from moto.dynamodb.models import dynamodb_backends  # noqa: PLC0415 - the server process only

    return [table for regions in dynamodb_backends.values() for backend in regions.values()
            for table in backend.tables.values()]


def lagging_global_indexes(lag: IndexLag) -> None:
    """Make moto's ``Table.query`` on a global index read ``lag``'s view of the table."""
    import inspect  # noqa: PLC0415

    from moto.dynamodb.models.table import Table  # noqa: PLC0415

    original = Table.query
    signature = inspect.signature(original)

    def query(self, *args, **kwargs):
        index_name = signature.bind(self, *args, **kwargs).arguments.get("index_name")
        view = (lag.view(self) if index_name and index_name in {i.name for i in self.global_indexes or []}
                else None)
        if view is None:
            return original(self, *args, **kwargs)
        self.all_items = lambda: view  # this call only: the server runs one request at a time
        try:
            return original(self, *args, **kwargs)
        finally:
            del self.all_items

    Table.query = query  # type: ignore[method-assign]  # moto's method, replaced in this server process only


def set_gsi_lag(url: str, lag_s: float, timeout_s: float = 5.0) -> None:
    """Set the index lag of the serialised DynamoDB endpoint at ``url`` (:class:`IndexLag`).

    Raises:
        OSError: the endpoint did not answer, or refused the value (HTTP 400).
    """
    request = urllib.request.Request(f"{url}{GSI_LAG_PATH}", data=json.dumps({"lag_s": lag_s}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        reply.read()


#: DynamoDB's transaction entries and the IAM action each is authorised as (AWS: "Using IAM with
#: DynamoDB transactions": no TransactWriteItems action exists, each item needs its own).
TRANSACTION_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                       "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}


def dynamodb_authorizations(action: str, body: dict, table_arn: Callable[[str], str]) -> list[tuple[str, str]]:
    """The (IAM action, resource ARN) pairs AWS authorises for DynamoDB request ``action`` with the
    parsed request ``body``: each transaction item as its own action on its table; each table of a
    batch; the index ARN (``<table>/index/<name>``) of a query or scan of an index; else the table."""
    if action in ("TransactWriteItems", "TransactGetItems"):
        pairs = []
        for entry in body.get("TransactItems", []):
            for kind, operation in entry.items():
                pairs.append((TRANSACTION_ACTIONS[kind], table_arn(operation["TableName"])))
        return pairs
    if action in ("BatchGetItem", "BatchWriteItem"):
        return [(action, table_arn(table)) for table in body.get("RequestItems", {})]
    if "TableName" not in body:
        return [(action, "*")]
    arn = table_arn(body["TableName"])
    return [(action, f"{arn}/index/{body['IndexName']}" if body.get("IndexName") else arn)]


def resource_level_authorization() -> None:
    """Make moto's IAM enforcement check DynamoDB and KMS requests against their resource, as AWS does.

    moto 5.2 authorises SQS, S3 and IAM requests against the queue, object or role they name, but
    every DynamoDB and KMS request (and SQS GetQueueUrl) against the resource ``"*"``, which no
    statement naming a table, key or queue matches (moto.iam.access_control): a least-privilege
    policy would refuse them all; and it names CloudWatch's actions ``monitoring:*``. Here a
    DynamoDB request is authorised as :func:`dynamodb_authorizations` says, and a KMS request against
    the ARN of the key its ``KeyId`` names (key id, ARN or alias) or, for a Decrypt without one, its
    ciphertext names; and a role's inline policy made by
    CloudFormation is read at all (moto keeps it as a dict). For the IAM-enforcing server only
    (``--iam``); enforcement itself is moto's (``POST /moto-api/reset-auth``).
    """
    from moto.dynamodb.responses import DynamoHandler
    from moto.iam.access_control import IAMPolicy, IAMRequest
    from moto.kms.models import kms_backends
    from moto.kms.utils import KEY_ID_LEN as KMS_KEY_ID_LEN
    from moto.kms.responses import KmsResponse
    from moto.sqs.responses import SQSResponse

    authorize = DynamoHandler._authenticate_and_authorize_normal_action

    def authorize_dynamodb(self, resource: str = "*") -> None:
        body = self.body if isinstance(self.body, dict) else json.loads(self.body or "{}")
        prefix = f"arn:aws:dynamodb:{self.region}:{self.current_account}:table/"
        get_action = self._get_action
        try:
            for action, arn in dynamodb_authorizations(get_action(), body, lambda table: prefix + table):
                self._get_action = lambda action=action: action  # the action moto's IAMRequest checks
                authorize(self, arn)
        finally:
            del self._get_action

    def kms_resource(self) -> str:
        key_id = json.loads(self.body or "{}").get("KeyId")
        if not key_id and self._get_action() == "Decrypt":
            # AWS authorises a Decrypt against the key its ciphertext names: moto's blob starts with it
            key_id = self._get_param("CiphertextBlob", b"")[:KMS_KEY_ID_LEN].decode("utf-8", "replace")
        if not key_id:
            return "*"
        backend = kms_backends[self.current_account][self.region]
        try:
            return backend.describe_key(backend.any_id_to_key_id(key_id)).arn
        except Exception:  # noqa: BLE001 - an unknown key: moto's own call answers NotFound after the check
            return "*"

    # moto's AWS::IAM::Role keeps an inline policy of a template as the parsed document (a dict),
    # which its own IAMPolicy reads only as JSON text or as a {"policy_document": ...} record
    policy_init = IAMPolicy.__init__

    def iam_policy_init(self, policy) -> None:
        if isinstance(policy, dict) and "Statement" in policy:
            policy = json.dumps(policy)
        policy_init(self, policy)

    # moto reads the queue of an SQS request from its QueueUrl only: GetQueueUrl (QueueName) would be
    # checked against "*"
    queue_resource = SQSResponse._determine_resource

    def sqs_resource(self) -> str:
        name = self._get_param("QueueName")
        if name and self._get_action() == "GetQueueUrl":
            try:
                return self.sqs_backend.get_queue(name).queue_arn
            except Exception:  # noqa: BLE001 - no such queue: moto's own call answers after the check
                return "*"
        return queue_resource(self)

    # moto names an action by the request's signing name, which for CloudWatch is "monitoring";
    # IAM's service prefix is "cloudwatch" (AWS service authorization reference)
    request_init = IAMRequest.__init__

    def iam_request_init(self, *args, **kwargs) -> None:
        request_init(self, *args, **kwargs)
        if self._action.startswith("monitoring:"):
            self._action = "cloudwatch:" + self._action.removeprefix("monitoring:")

    IAMRequest.__init__ = iam_request_init  # type: ignore[method-assign]  # moto's, in the --iam server process only
    SQSResponse._determine_resource = sqs_resource  # type: ignore[method-assign]  # moto's hook, --iam server only
    IAMPolicy.__init__ = iam_policy_init  # type: ignore[method-assign]  # moto's, in the --iam server process only
    DynamoHandler._authenticate_and_authorize_normal_action = authorize_dynamodb  # type: ignore[method-assign]  # moto's method, replaced in the --iam server process only
    KmsResponse._determine_resource = kms_resource  # type: ignore[attr-defined]  # moto's hook (BaseResponse.call_action)


#: Path of the serialised endpoint's own account of its work (:func:`serialized`, :func:`endpoint_busy`).
BUSY_PATH = "/_local/busy"


def serialized(app: Callable, lag: IndexLag | None = None) -> Callable:
    """The WSGI ``app`` one request at a time: each request's body is read whole on its own
    thread first, then the request takes a process-wide lock for moto's work; the response is
    built inside the lock and written after it (werkzeug writes on the first body chunk).

    It also keeps the seconds its requests held the lock and their number, served as JSON
    ``{"busy_s": float, "requests": int}`` at ``GET`` :data:`BUSY_PATH` (outside the lock, not
    counted): the share of a run the endpoint was busy tells a run bound by the emulator from one
    bound by the service (``make bench-sched``). With ``lag``, ``POST`` :data:`GSI_LAG_PATH`
    ``{"lag_s": float}`` sets the index lag, and every write is recorded for it (:class:`IndexLag`)."""
    lock = threading.Lock()
    account = {"busy_s": 0.0, "requests": 0}

    def wrapped(environ: dict, start_response: Callable) -> list[bytes]:
        if environ.get("PATH_INFO") == BUSY_PATH and environ.get("REQUEST_METHOD") == "GET":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(account).encode()]
        length = environ.get("CONTENT_LENGTH")
        stream = environ["wsgi.input"]
        body = stream.read(int(length)) if length else (stream.read() if environ.get("wsgi.input_terminated") else b"")
        environ["wsgi.input"] = io.BytesIO(body)
        if lag is not None and environ.get("PATH_INFO") == GSI_LAG_PATH and environ.get("REQUEST_METHOD") == "POST":
            return _set_lag(lag, body, lock, start_response)
        with lock:
            started = time.perf_counter()
            try:
                return list(app(environ, start_response))
            finally:
                if lag is not None and environ.get("PATH_INFO") == "/moto-api/reset":
                    lag.set(lag.lag_s)  # new tables: the copies start again
                elif lag is not None and environ.get("HTTP_X_AMZ_TARGET", "").rsplit(".", 1)[-1] in _WRITES:
                    lag.record()
                account["busy_s"] += time.perf_counter() - started
                account["requests"] += 1

    return wrapped


def _set_lag(lag: IndexLag, body: bytes, lock: threading.Lock, start_response: Callable) -> list[bytes]:
    try:
        lag_s = float(json.loads(body)["lag_s"])
        with lock:
            lag.set(lag_s)
    except (ValueError, KeyError, TypeError) as exc:
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [f"lag_s: {exc}".encode()]
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"lag_s": lag.lag_s}).encode()]


def endpoint_busy(url: str, timeout_s: float = 5.0) -> tuple[float, int]:
    """``(busy_s, requests)`` of the serialised endpoint at ``url`` so far (:func:`serialized`):
    seconds its requests held its lock, and how many there were.

    Raises:
        OSError: the endpoint did not answer (or is not a serialised one: HTTP 404 from moto).
    """
    with urllib.request.urlopen(f"{url}{BUSY_PATH}", timeout=timeout_s) as reply:
        account = json.loads(reply.read())
    return float(account["busy_s"]), int(account["requests"])


def serve(host: str, port: int, single_threaded: bool, parent_pid: int | None = None, iam: bool = False,
          gsi_lag_s: float = 0.0) -> None:
    """Serve moto's backends on ``host:port`` (port 0 picks a free one) until killed, or until
    ``parent_pid`` exits; with ``iam``, DynamoDB and KMS requests are authorised per resource once
    enforcement is on (:func:`resource_level_authorization`). ``gsi_lag_s``: the single-threaded
    server's first index lag (:class:`IndexLag`)."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    from devstack import conformance

    conformance.install()  # AWS's quotas, refused as AWS refuses them (docs/development.md)
    if iam:
        resource_level_authorization()
    app = forgetting_copies(DomainDispatcherApplication(create_backend_app))
    if single_threaded:
        item_level_transaction_rollback()
        lag = IndexLag(gsi_lag_s)
        lagging_global_indexes(lag)
        app = serialized(app, lag)
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
    print(f"listening on {server.server_port}", flush=True)
    if parent_pid:
        _exit_with_parent(parent_pid)
    server.serve_forever()


class MotoProcess:
    """One moto server in a child process; ``url`` is set once it answers."""

    def __init__(self, *, single_threaded: bool, log: IO[bytes] | None = None, iam: bool = False,
                 gsi_lag_s: float = 0.0) -> None:
        cmd = [sys.executable, "-m", "devstack.localaws", "--port", "0", "--parent-pid", str(os.getpid())]
        if single_threaded:
            cmd += ["--single-threaded", "--gsi-lag-s", str(gsi_lag_s)]
        if iam:
            cmd.append("--iam")
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log if log is not None else subprocess.DEVNULL,
            start_new_session=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self.proc.stdout is not None
        try:
            line = self.proc.stdout.readline().decode()
            if not line.startswith("listening on "):
                raise RuntimeError(f"moto server did not start (said {line!r})")
            self.port = int(line.split()[-1])
            self.url = f"http://127.0.0.1:{self.port}"
            self._wait_ready()
        except BaseException:  # not started, or Ctrl-C while it starts: it must not run on
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).read()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the server (and wait for it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class LocalAws:
    """Both moto servers; a context manager whose :attr:`env` points the AWS SDK at them.

    Example::

        with LocalAws() as aws:
            os.environ.update(aws.env)
    """

    def __init__(self, log_path: Path | None = None, *, gsi_lag_s: float = 0.0) -> None:
        self.log_path = log_path
        #: Seconds the DynamoDB endpoint's global indexes lag behind its tables (:class:`IndexLag`).
        self.gsi_lag_s = gsi_lag_s
        self.main: MotoProcess | None = None
        self.dynamodb: MotoProcess | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> "LocalAws":
        """Start both servers; returns self."""
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")
        try:
            self.main = MotoProcess(single_threaded=False, log=self._log)
            self.dynamodb = MotoProcess(single_threaded=True, log=self._log, gsi_lag_s=self.gsi_lag_s)
        except BaseException:  # a server that did not start, or Ctrl-C meanwhile: stop what did
            self.stop()
            raise
        return self

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point boto3, PynamoDB and kombu at the servers."""
        assert self.main is not None and self.dynamodb is not None, "call start() first"
        return {
            "AWS_ENDPOINT_URL": self.main.url,
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb.url,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
            "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        }

    def stop(self) -> None:
        """Stop both servers."""
        for server in (self.main, self.dynamodb):
            if server is not None:
                server.stop()
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> "LocalAws":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--single-threaded", action="store_true")
    parser.add_argument("--parent-pid", type=int, default=None, help="Exit when this process is gone.")
    parser.add_argument("--iam", action="store_true",
                        help="Authorise DynamoDB and KMS requests per resource once IAM enforcement is on.")
    parser.add_argument("--gsi-lag-s", type=float, default=0.0,
                        help="With --single-threaded: global indexes show the tables this many seconds late.")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.single_threaded, args.parent_pid, iam=args.iam, gsi_lag_s=args.gsi_lag_s)


if __name__ == "__main__":
    main()
