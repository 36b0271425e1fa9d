"""Helpers of the adversarial tests: hostile PDFs written byte by byte, decompression bombs, raw SQS
messages, submissions.

Queue depths and job waits come from the shared helpers (``tests.admission.helpers.queue_messages``,
``tests.support.cluster.Cluster.final``)."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import uuid
import zlib
from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name

from tests.imposition.imposition_pdfs import add_page

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
    from imposition.common import aws
    from imposition.common.settings import get_settings
    from imposition.common.tenancy import input_key
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


GIB = 1024**3


@functools.cache
def four_gib_twice_flated() -> bytes:
    """Four GiB of spaces: a 4 MiB zlib stream, compressed again into about 10 KB."""
    return zlib.compress(flate_bomb(4 * GIB), 9)


def _bomb_stream(pdf: pikepdf.Pdf, *, chain: str = "flate-flate", **entries) -> pikepdf.Stream:
    """A stream of ``pdf`` that decodes to GiBs (``chain``: which filters), with ``entries`` added."""
    stream = pikepdf.Stream(pdf, b"")
    if chain == "flate-flate":
        stream.write(four_gib_twice_flated(), filter=Array([Name.FlateDecode, Name.FlateDecode]))
    elif chain == "a85-flate-flate-flate":  # four filters, ASCII85 outside
        data = base64.a85encode(zlib.compress(four_gib_twice_flated(), 9))
        stream.write(data, filter=Array([Name.ASCII85Decode, Name.FlateDecode, Name.FlateDecode, Name.FlateDecode]))
    elif chain == "flate-lzw":  # LZW codes (1 GiB of spaces), compressed
        stream.write(zlib.compress(lzw_bomb(GIB), 9), filter=Array([Name.FlateDecode, Name.LZWDecode]))
    for key, value in entries.items():
        stream[f"/{key}"] = value
    return stream


def save_as_written(pdf: pikepdf.Pdf, path: Path) -> Path:
    """Save ``pdf`` with its streams as written (qpdf would otherwise decode a bomb to recompress it)."""
    pdf.save(path, stream_decode_level=pikepdf.StreamDecodeLevel.none, compress_streams=False)
    return path


def bomb_pdf(path: Path, where: str, chain: str = "flate-flate") -> Path:
    """A one-page PDF (a few KB) with a 4 GiB bomb ``where``: ``content`` (the page's content
    stream), ``form`` (a form XObject it draws), ``appearance`` (a printing annotation's normal
    appearance), ``image`` (an image XObject it draws), ``unused`` (an embedded file no page reaches)."""
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        if where == "content":
            page.obj.Contents = _bomb_stream(pdf, chain=chain)
        elif where == "form":
            form = _bomb_stream(pdf, chain=chain, Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 100, 100])
            page.obj.Resources.XObject = Dictionary(Fm0=form)
            page.obj.Contents = pdf.make_stream(b"q /Fm0 Do Q")
        elif where == "appearance":
            appearance = _bomb_stream(pdf, chain=chain, Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 50, 50])
            page.obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(Dictionary(
                Type=Name.Annot, Subtype=Name.Square, Rect=[10, 10, 60, 60], F=4, AP=Dictionary(N=appearance),
            ))]))
        elif where == "image":
            image = _bomb_stream(pdf, chain=chain, Type=Name.XObject, Subtype=Name.Image, Width=65536, Height=65536,
                                 ColorSpace=Name.DeviceGray, BitsPerComponent=8)
            page.obj.Resources.XObject = Dictionary(Im0=image)
            page.obj.Contents = pdf.make_stream(b"q 100 0 0 100 10 10 cm /Im0 Do Q")
        elif where == "unused":
            attachment = _bomb_stream(pdf, chain=chain, Type=Name.EmbeddedFile)
            spec = Dictionary(Type=Name.Filespec, F=pikepdf.String("bomb.bin"), EF=Dictionary(F=attachment))
            pdf.Root.Names = Dictionary(EmbeddedFiles=Dictionary(Names=Array([pikepdf.String("bomb.bin"), spec])))
        else:
            raise ValueError(where)
        return save_as_written(pdf, path)
