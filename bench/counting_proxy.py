"""A loopback HTTP proxy in front of the local AWS endpoint that counts requests by operation.

``make bench-sched`` points every process (workers, beat, the submitter) at it, so AWS requests
are counted at the endpoint, whoever sends them: ``dynamodb.TransactWriteItems``,
``sqs.ReceiveMessage``, ``s3.PUT`` …

The operation is read from ``X-Amz-Target`` (the JSON protocols of DynamoDB and SQS), else from the
``Action`` of a query-protocol body (SQS), else it is ``<service>.<HTTP method>``.
"""

from __future__ import annotations

import http.client
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer"}


def operation_of(service: str, headers, body: bytes, method: str) -> str:
    """``<service>.<operation>`` of one request (see module docstring)."""
    target = headers.get("X-Amz-Target")
    if target:
        return f"{service}.{target.rsplit('.', 1)[-1]}"
    if body and b"Action=" in body[:4096]:
        action = parse_qs(body[:4096].decode("latin-1")).get("Action")
        if action:
            return f"{service}.{action[0]}"
    return f"{service}.{method}"


class CountingProxy:
    """Forward ``http://127.0.0.1:<port>`` to ``upstream`` and count each request's operation.

    Args:
        upstream: ``http://host:port`` of the real endpoint.
        service: the label of this endpoint's requests (``sqs``, ``dynamodb``; S3 shares the SQS
            endpoint locally and is told apart by its lack of an SQS operation: ``s3.<METHOD>``).
    """

    def __init__(self, upstream: str, service: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.service = service
        self.counts: Counter = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The response goes out in two writes (headers, then body): with Nagle's algorithm on, the
            # body waits for the client's delayed ACK of the headers, 40 ms on Linux, on every request.
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                op = operation_of(proxy.service, self.headers, body, self.command)
                if op.endswith(f".{self.command}") and proxy.service == "sqs":
                    op = f"s3.{self.command}"
                with proxy._lock:
                    proxy.counts[op] += 1
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except OSError as exc:  # the endpoint went away (the run is stopping): answer 502
                    self.send_error(502, f"upstream: {exc}")
                    return
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)  # a client that hung up is no error

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name=f"proxy-{service}")

    def start(self) -> "CountingProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self) -> Counter:
        """The counts so far, and reset them."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts
