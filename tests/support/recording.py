"""The DynamoDB requests the whole cluster sent, as the moto server received them (moto's own
request recorder, ``/moto-api/recorder/``; its file is the session's, set in ``tests/conftest.py``).

    with DynamoRecording(local_aws) as recording:
        ...
    recording.calls("Query")  # → [request body (dict), …] in arrival order
"""

from __future__ import annotations

import base64
import json
import urllib.request


class DynamoRecording:
    """Records every request the session's DynamoDB moto server receives while the block runs."""

    def __init__(self, local_aws) -> None:
        self.url = local_aws.dynamodb.url
        self.requests: list[tuple[str, dict]] = []  # (operation, body)

    def _post(self, action: str) -> bytes:
        request = urllib.request.Request(f"{self.url}/moto-api/recorder/{action}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.read()

    def __enter__(self) -> "DynamoRecording":
        self._post("reset-recording")
        self._post("start-recording")
        return self

    def __exit__(self, *exc) -> None:
        self._post("stop-recording")
        with urllib.request.urlopen(f"{self.url}/moto-api/recorder/download-recording", timeout=10) as answer:
            lines = answer.read().decode().splitlines()
        self._post("reset-recording")
        for line in lines:
            entry = json.loads(line)
            target = {k.lower(): v for k, v in entry["headers"].items()}.get("x-amz-target", "")
            body = entry.get("body") or ""
            if entry.get("body_encoded"):
                body = base64.b64decode(body).decode()
            self.requests.append((target.rsplit(".", 1)[-1], json.loads(body) if body else {}))

    def calls(self, operation: str) -> list[dict]:
        """The bodies of the recorded requests of ``operation`` (``Query``, ``TransactWriteItems``, …)."""
        return [body for op, body in self.requests if op == operation]
