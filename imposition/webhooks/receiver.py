"""A small webhook receiver for the demo tenants: the tenant side of docs/design.md §1, as its own process.

``python -m imposition.webhooks.receiver --port 0`` binds a free port on 127.0.0.1 and prints it (alone, on the
first line of stdout), then serves:

``POST /hooks/<tenant_id>``
    verifies the request with :func:`imposition.webhooks.signing.verify_webhook` under the tenant's secret
    (read from the tenants table; replays remembered in Redis by default, so several receivers
    refuse each other's replays; 503 while Redis is unreachable) and, if it verifies, confirms the job with
    :func:`admission.confirm` (lowering the tenant's in-flight count) and answers 200. A request
    that fails verification gets 400 and confirms nothing, whatever its headers and body hold
    (a malformed ``Content-Length`` too); an unknown tenant gets 404.
``GET /confirmations``
    JSON ``{"tenants": {tenant: {"accepted", "confirmed", "rejected", "jobs": {job_id: accepted}}},
    "accepted", "confirmed", "rejected"}``: events accepted (verified), confirmations that lowered an
    in-flight count (a redelivered event is accepted again but confirms nothing), requests rejected.

Use a tenant's URL ``http://127.0.0.1:<port>/hooks/<tenant_id>`` with ``imposition tenant
set-webhook``. Neither the secret nor the signature is ever logged.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections import defaultdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from imposition.common.settings import get_settings
from imposition.common.tenancy import TenancyError, validate_tenant_id
from imposition.webhooks.endpoints import endpoint_for
from imposition.webhooks.errors import ReplayStoreUnavailable, WebhookVerificationError
from imposition.webhooks.signing import ReplayStore, verify_webhook

log = logging.getLogger(__name__)

HOOK_PATH = "/hooks/"
CONFIRMATIONS_PATH = "/confirmations"
#: Largest request body read, bytes (an event is well under 2 KiB).
MAX_BODY_BYTES = 64 * 1024


class Confirmations:
    """What the receiver accepted, confirmed and rejected, per tenant. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tenants: dict[str, dict] = defaultdict(
            lambda: {"accepted": 0, "confirmed": 0, "rejected": 0, "jobs": defaultdict(int)})

    def add(self, tenant_id: str, *, job_id: str | None = None, confirmed: bool = False) -> None:
        """Count one accepted event (``job_id`` given) or one rejected request (``job_id`` None)."""
        with self._lock:
            entry = self._tenants[tenant_id]
            if job_id is None:
                entry["rejected"] += 1
                return
            entry["accepted"] += 1
            entry["jobs"][job_id] += 1
            entry["confirmed"] += int(confirmed)

    def snapshot(self) -> dict:
        """The counts as plain JSON-ready data (see module docstring)."""
        with self._lock:
            tenants = {t: {**e, "jobs": dict(e["jobs"])} for t, e in self._tenants.items()}
        totals = {name: sum(e[name] for e in tenants.values()) for name in ("accepted", "confirmed", "rejected")}
        return {"tenants": tenants, **totals}


class ReceiverServer(ThreadingHTTPServer):
    """The receiver's HTTP server, with the :class:`Confirmations` its handler records."""

    confirmations: Confirmations


def make_server(host: str = "127.0.0.1", port: int = 0, *, tolerance_s: float | None = None,
                replay_store: ReplayStore | None = None) -> ReceiverServer:
    """A receiver bound to ``host:port`` (0: a free port; see ``server.server_address``), not yet serving.

    Its :class:`Confirmations` is ``server.confirmations``.
    """
    from imposition import admission  # noqa: PLC0415 (keeps ``--help`` fast)

    tolerance = get_settings().webhook_tolerance_s if tolerance_s is None else tolerance_s
    confirmations = Confirmations()

    class Handler(BaseHTTPRequestHandler):
        server_version = "imposition-demo-receiver"

        def _answer(self, status: HTTPStatus, payload: dict) -> None:
            data = json.dumps(payload, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == CONFIRMATIONS_PATH:
                self._answer(HTTPStatus.OK, confirmations.snapshot())
            else:
                self._answer(HTTPStatus.NOT_FOUND, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
            tenant_id = self.path[len(HOOK_PATH):] if self.path.startswith(HOOK_PATH) else ""
            declared = self.headers.get_all("Content-Length") or ["0"]
            if len(declared) > 1 or not declared[0].strip().isdigit() or not declared[0].isascii():
                self._answer(HTTPStatus.BAD_REQUEST, {"error": "Content-Length: one non-negative integer needed"})
                return
            length = int(declared[0])
            if length > MAX_BODY_BYTES:
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body over {MAX_BODY_BYTES} bytes"})
                return
            body = self.rfile.read(length)
            try:
                endpoint = endpoint_for(validate_tenant_id(tenant_id))
            except TenancyError:
                endpoint = None
            if endpoint is None:
                self._answer(HTTPStatus.NOT_FOUND, {"error": "no webhook configured for this tenant"})
                return
            try:
                event = verify_webhook(self.headers, body, endpoint.secret, tolerance, replay_store=replay_store)
            except ReplayStoreUnavailable as exc:  # neither accepted nor a forgery: the sender tries again
                log.warning("tenant %s: webhook not verified, replay store down: %s", tenant_id, exc)
                self._answer(HTTPStatus.SERVICE_UNAVAILABLE, {"error": type(exc).__name__})
                return
            except WebhookVerificationError as exc:
                confirmations.add(tenant_id)
                log.warning("tenant %s: rejected a webhook: %s: %s", tenant_id, type(exc).__name__, exc)
                self._answer(HTTPStatus.BAD_REQUEST, {"error": type(exc).__name__})
                return
            job_id = str(event.get("job_id"))
            confirmed = admission.confirm(job_id, tenant_id=tenant_id)
            confirmations.add(tenant_id, job_id=job_id, confirmed=confirmed)
            log.info("tenant %s: job %s %s (event %s), confirmed=%s",
                     tenant_id, job_id, event.get("status"), event.get("id"), confirmed)
            self._answer(HTTPStatus.OK, {"received": event.get("id"), "confirmed": confirmed})

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            log.debug("%s - %s", self.address_string(), format % args)

    server = ReceiverServer((host, port), Handler)
    server.daemon_threads = True
    server.confirmations = confirmations
    return server


#: What the receiver logs once it serves (:class:`devstack.stack.ReceiverProcess` waits for it).
READY_MARKER = "webhook receiver listening"


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m imposition.webhooks.receiver [--host H] [--port P] [--tolerance-s S]``."""
    parser = argparse.ArgumentParser(prog="python -m imposition.webhooks.receiver", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: pick a free port (printed on stdout)")
    parser.add_argument("--tolerance-s", type=float, default=None,
                        help="signature timestamp tolerance (default Settings.webhook_tolerance_s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("botocore", "boto3", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    server = make_server(args.host, args.port, tolerance_s=args.tolerance_s)
    print(server.server_address[1], flush=True)
    log.info("%s on http://%s:%s%s<tenant_id>", READY_MARKER, args.host, server.server_address[1], HOOK_PATH)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
