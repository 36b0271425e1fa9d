"""A loopback TCP proxy in front of an endpoint (a moto server, Redis) that can be switched to fail.

Processes (celery workers, beat) are pointed at :attr:`FaultProxy.url` instead of the endpoint
(``AWS_ENDPOINT_URL_SQS=<proxy url>``, a ``redis://`` URL on the proxy's port); the fault tests and
the fault soak (:mod:`soak`) switch its mode while they run. Nothing of the client is touched.
Modes, for each new connection:

* ``forward``: relayed byte for byte (the default); ``stall``: relayed, but nothing the endpoint
  answers reaches the client until the mode changes (the request applies, its answer is late);
* ``http_503`` / ``http_400``: the HTTP request is read and answered ``503 ServiceUnavailable`` /
  ``400 ThrottlingException`` (AWS JSON error body, ``Connection: close``); nothing reaches the endpoint;
* ``reset``: accepted and reset at once (``ECONNRESET``); ``refuse``: the proxy stops listening
  (``ECONNREFUSED``) until the mode changes. These two and ``stall`` suit any TCP protocol.

Switching to a failing mode also resets every connection being relayed at that moment (a long
poll fails mid-request, as when a load balancer drops it). ``faults`` counts failed connections by
mode. Example::

    with FaultProxy(local_aws.main.url) as proxy:
        ...                                   # processes use proxy.url
        with proxy.failing("http_503"):
            time.sleep(3)
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit

MODES = ("forward", "http_503", "http_400", "reset", "refuse", "stall")
#: Modes that relay new connections to the endpoint.
_RELAYING = ("forward", "stall")
#: Failing HTTP modes → status line and AWS error type of the answer.
_ANSWERS = {
    "http_503": (b"503 Service Unavailable", "ServiceUnavailable"),
    "http_400": (b"400 Bad Request", "ThrottlingException"),
}

_BUFFER_BYTES = 65_536
_HEADER_LIMIT_BYTES = 65_536
#: Seconds a failing connection may take to send its request before it is dropped anyway.
_REQUEST_READ_TIMEOUT_S = 5.0


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST (SO_LINGER on, 0 s) instead of an orderly FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _read_request(sock: socket.socket) -> None:
    """Read one HTTP request (headers, then ``Content-Length`` bytes of body) and drop it."""
    sock.settimeout(_REQUEST_READ_TIMEOUT_S)
    data = b""
    while b"\r\n\r\n" not in data and len(data) < _HEADER_LIMIT_BYTES:
        chunk = sock.recv(_BUFFER_BYTES)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    remaining = length - len(body)
    while remaining > 0:
        chunk = sock.recv(min(_BUFFER_BYTES, remaining))
        if not chunk:
            return
        remaining -= len(chunk)


def _error_answer(mode: str) -> bytes:
    """The HTTP answer of failing mode ``mode`` (a key of :data:`_ANSWERS`)."""
    status, error_type = _ANSWERS[mode]
    body = json.dumps({"__type": f"com.amazonaws.sqs#{error_type}",
                       "message": "injected by devstack.fault_proxy"}).encode()
    return (b"HTTP/1.1 " + status + b"\r\n"
            b"Content-Type: application/x-amz-json-1.0\r\n"
            b"x-amzn-RequestId: fault-proxy\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + body)


class FaultProxy:
    """A threaded TCP proxy on 127.0.0.1 (a free port) relaying to the endpoint at ``target_url``.

    Args:
        target_url: ``scheme://host:port`` of the endpoint (``http://`` for the HTTP modes;
            ``redis://`` or any other scheme for ``forward``/``stall``/``reset``/``refuse``).

    Raises:
        ValueError: ``target_url`` has no host or port, or a mode is not one of :data:`MODES`.
    """

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        if not parts.hostname or not parts.port:
            raise ValueError(f"target_url {target_url!r} needs a host and a port")
        self.target = (parts.hostname, parts.port)
        self.faults: Counter = Counter()
        self._mode = "forward"
        self._lock = threading.Lock()
        self._live: dict[socket.socket, socket.socket] = {}  # relayed connections: client → upstream
        self._doomed: set[socket.socket] = set()  # client sockets to be closed with a reset
        self._listener: socket.socket | None = None
        self._port = 0
        self._stopped = threading.Event()
        self._flowing = threading.Event()  # clear while stalled: answers wait
        self._flowing.set()

    # -- life cycle ------------------------------------------------------------------------------

    def start(self) -> "FaultProxy":
        """Listen on a free port of 127.0.0.1 and serve in a daemon thread; returns self."""
        self._listen()
        return self

    def stop(self) -> None:
        """Stop listening and reset every relayed connection."""
        self._stopped.set()
        with self._lock:
            self._close_listener()
            live, self._live = self._live, {}
        for client, upstream in live.items():
            self._kill(client, upstream)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: where clients should connect."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        """The port the proxy listens on (127.0.0.1), kept across ``refuse``."""
        return self._port

    # -- modes -----------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """The current mode (see the module docstring)."""
        return self._mode

    def set_mode(self, mode: str) -> None:
        """Switch to ``mode``; a failing mode also resets the connections being relayed now.

        Raises:
            ValueError: ``mode`` is not one of :data:`MODES`.
        """
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        with self._lock:
            previous, self._mode = self._mode, mode
            live: dict[socket.socket, socket.socket] = {}
            if mode not in _RELAYING:
                live, self._live = self._live, {}
            if mode == "refuse":
                self._close_listener()
        for client, upstream in live.items():
            self.faults[mode] += 1
            self._kill(client, upstream)
        if mode == "stall":
            self.faults[mode] += 1
            self._flowing.clear()
        else:
            self._flowing.set()
        if previous == "refuse" and mode != "refuse":
            self._listen()

    @contextlib.contextmanager
    def failing(self, mode: str) -> Iterator["FaultProxy"]:
        """``mode`` inside the ``with`` block, ``forward`` after it (also on an exception)."""
        self.set_mode(mode)
        try:
            yield self
        finally:
            self.set_mode("forward")

    # -- serving ---------------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self._port))  # the same port again after ``refuse``
        listener.listen(128)
        self._port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept_loop, args=(listener,), name="fault-proxy-accept",
                         daemon=True).start()

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed (``refuse`` or stop)
                return
            threading.Thread(target=self._serve, args=(client,), name="fault-proxy-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        mode = self._mode
        if mode == "reset" or mode == "refuse":  # refuse: accepted in the instant before the switch
            self.faults[mode] += 1
            _reset(client)
            return
        if mode in _ANSWERS:
            self.faults[mode] += 1
            try:
                _read_request(client)
                client.sendall(_error_answer(mode))
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    client.close()
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        with self._lock:
            if self._mode not in _RELAYING:  # switched while connecting
                self.faults[self._mode] += 1
                _reset(client)
                upstream.close()
                return
            self._live[client] = upstream
        threading.Thread(target=self._pump, args=(upstream, client, True), name="fault-proxy-down",
                         daemon=True).start()
        self._pump(client, upstream)

    def _kill(self, client: socket.socket, upstream: socket.socket) -> None:
        """Reset a relayed connection: wake both pumps; the client side is then closed with a RST."""
        with self._lock:
            self._doomed.add(client)
        with contextlib.suppress(OSError):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for sock, how in ((client, socket.SHUT_RD), (upstream, socket.SHUT_RDWR)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)  # a blocked recv() returns; SHUT_RD sends the client nothing

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool = False) -> None:
        """Copy ``source`` to ``sink`` until either end closes; then close both (a doomed client
        socket with a RST, the others with a FIN). ``answers`` (endpoint → client) wait while
        stalled."""
        try:
            while True:
                data = source.recv(_BUFFER_BYTES)
                if not data:
                    break
                if answers:
                    self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                for sock in (source, sink):
                    self._live.pop(sock, None)
                doomed = {sock for sock in (source, sink) if sock in self._doomed}
                self._doomed -= doomed
            for sock in (source, sink):
                if sock not in doomed:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
