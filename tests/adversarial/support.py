"""Helpers of the adversarial tests: hostile PDFs written byte by byte, raw SQS messages, submissions.

Queue depths and job waits come from the shared helpers (``tests.admission.helpers.queue_messages``,
``tests.support.cluster.Cluster.final``)."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
import zlib

#: A page's content: one filled square.
SQUARE = b"0 0 1 rg 10 10 100 100 re f"


def raw_pdf(objects: dict[int, bytes], root: int = 1) -> bytes:
    """A PDF holding exactly ``objects`` (number → body), with a correct cross-reference table, so a
    malformation is the one written, not one qpdf must first repair."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    size = max(objects) + 1
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, root, xref_at)
    return bytes(out)


def a5_pdf(pages: int = 8, *, page_entries: bytes = b"/Contents 3 0 R", count: int | None = None) -> bytes:
    """``pages`` A5 pages sharing one content stream; ``page_entries`` and ``count`` (the page
    tree's /Count) let a test break one thing."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Length %d >>\nstream\n" % len(SQUARE) + SQUARE + b"\nendstream",
    }
    kids = []
    for index in range(pages):
        objects[4 + index] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 420 595] %s >>" % page_entries
        kids.append(b"%d 0 R" % (4 + index))
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), pages if count is None else count)
    return raw_pdf(objects)


def celery_sqs_body(body: object, *, task: str = "imposition.impose") -> str:
    """An SQS message body as kombu's SQS transport writes one: base64 of the JSON envelope whose
    ``body`` is base64 of the task payload ``body`` (JSON), with Celery protocol 2 headers."""
    headers = {"lang": "py", "task": task, "id": uuid.uuid4().hex, "root_id": None, "parent_id": None,
               "group": None, "retries": 0, "eta": None, "expires": None, "timelimit": [None, None],
               "ignore_result": True, "argsrepr": "", "kwargsrepr": ""}
    envelope = {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {"body_encoding": "base64", "delivery_mode": 2, "priority": 0, "delivery_tag": "x",
                       "delivery_info": {"exchange": "imposition", "routing_key": "imposition"}},
    }
    return base64.b64encode(json.dumps(envelope).encode()).decode()


def submit_bytes(tenant_id: str, pdf: bytes, *, layout: dict | None = None, max_attempts: int | None = None) -> str:
    """Upload ``pdf`` under the tenant's prefix and submit it; returns the job id."""
    from service import aws
    from service.settings import get_settings
    from service.tenancy import input_key
    from tasks.submission import submit_job

    job_id = uuid.uuid4().hex
    key = input_key(tenant_id, job_id)
    aws.s3().put_object(Bucket=get_settings().bucket, Key=key, Body=pdf)
    return submit_job(tenant_id=tenant_id, token=f"tok-{job_id}", input_key=key, job_id=job_id,
                      layout=layout or {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"},
                      max_attempts=max_attempts)


@contextlib.contextmanager
def module_worker(tmp_path_factory, name: str):
    """A fresh local stack and one real imposition worker (2 slots) named ``name``, for a module."""
    from tests.conftest import reset_aws
    from tests.support.processes import start_worker

    reset_aws()
    process = start_worker(tmp_path_factory.mktemp(name), concurrency=2, name=name)
    try:
        yield process
    finally:
        process.stop()


#: Adler-32's modulus (RFC 1950 §8.2).
_ADLER_MODULUS = 65521


def flate_bomb(inflated_bytes: int, *, byte: int = 0x20, piece_bytes: int = 1 << 20) -> bytes:
    """A valid zlib stream that inflates to ``inflated_bytes`` (a multiple of ``piece_bytes``) copies of
    ``byte``, built in milliseconds without holding what it inflates to: one piece is compressed and
    ended with a full flush (so every later piece compresses to the same bytes), repeated, then closed
    with an empty final block and the Adler-32 of the whole, worked out in closed form."""
    piece = bytes([byte]) * piece_bytes
    packer = zlib.compressobj(9)
    first = packer.compress(piece) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(piece) + packer.flush(zlib.Z_FULL_FLUSH)
    n = inflated_bytes
    low = (1 + n * byte) % _ADLER_MODULUS
    high = (n + byte * (n * (n + 1) // 2)) % _ADLER_MODULUS
    return first + again * (n // piece_bytes - 1) + b"\x03\x00" + ((high << 16) | low).to_bytes(4, "big")


def lzw_bomb(inflated_at_least: int, *, byte: int = 0x20) -> bytes:
    """LZW data (PDF 32000-1 §7.4.4, EarlyChange 1) of at least ``inflated_at_least`` copies of ``byte``:
    the codes an encoder writes for one repeated byte (each new code one byte longer than the last),
    the table cleared whenever it is full, written directly."""
    out, buffer, held, produced, width = bytearray(), 0, 0, 0, 9

    def put(code: int, width: int) -> None:
        nonlocal buffer, held
        buffer, held = (buffer << width) | code, held + width
        while held >= 8:
            held -= 8
            out.append((buffer >> held) & 0xFF)
        buffer &= (1 << held) - 1

    while produced < inflated_at_least:
        put(256, width)  # clear, in the width the table had
        put(byte, 9)
        produced += 1
        size, width = 258, 9  # the next code the decoder will add
        for code in range(258, 4095):
            put(code, width)
            produced += code - 256
            size += 1
            width = 9 if size + 1 < 512 else 10 if size + 1 < 1024 else 11 if size + 1 < 2048 else 12
            if produced >= inflated_at_least:
                break
    put(257, width)
    if held:
        out.append((buffer << (8 - held)) & 0xFF)
    return bytes(out)
