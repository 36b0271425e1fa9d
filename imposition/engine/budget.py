"""The content budget: what the input's streams decode to and how many operators its content holds,
measured while decoding with a cap, before qpdf decodes any of it.

Runs inside the engine's child process (:mod:`imposition.engine.child`). Which streams count, how each filter
is bounded and why: ``docs/design.md``, "Bomb-proof input".
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name

from .errors import ContentTooLarge
from .job import ContentBudget
from .source import SourcePage, read_pages

#: Largest piece a decoding stage hands on at once (bytes): what a bomb can make the engine hold.
CHUNK_BYTES = 1 << 20
#: Bytes of a DCT (JPEG) stream searched for its frame header.
JPEG_HEADER_WINDOW_BYTES = 1 << 16
#: Components assumed for an image whose colour space does not say (the most a print colour space has
#: among the device spaces: CMYK).
DEFAULT_COMPONENTS = 4


@dataclass(frozen=True)
class ContentUse:
    """What :func:`check_content_budget` measured: ``decoded_bytes`` of every counted stream (at most: a
    stream the budget held by its raw length alone counts at its most), ``operators`` of every content
    stream, ``streams`` counted."""

    decoded_bytes: int
    operators: int
    streams: int
    #: Content streams (object numbers and generations) read whole by the count: unfiltered, or one
    #: /FlateDecode without /DecodeParms inflated to its end (zlib's end of stream and checksum):
    #: qpdf decodes them without error or warning, so the damage check need not decode them again.
    read_whole: frozenset[tuple[int, int]] = frozenset()


class _Over(Exception):
    """A count passed its cap: ``produced`` is how far it got, ``operators`` whether it counted
    operators (else decoded bytes)."""

    def __init__(self, produced: int, *, operators: bool = False) -> None:
        super().__init__(produced)
        self.produced = produced
        self.operators = operators


class _Unbounded(Exception):
    """The stream's decoded size cannot be bounded (an unknown filter, an image codec not last…)."""


# --- decoding stages: each takes the chunks of its input and yields chunks of its output -------------

def _capped(chunks: Iterable[bytes], cap: int) -> Iterator[bytes]:
    """``chunks`` unchanged; raises _Over as soon as more than ``cap`` bytes went through."""
    produced = 0
    for chunk in chunks:
        produced += len(chunk)
        if produced > cap:
            raise _Over(produced)
        yield chunk


def _inflate(chunks: Iterable[bytes], _parms: Dictionary | None) -> Iterator[bytes]:
    """FlateDecode (zlib, RFC 1950), at most CHUNK_BYTES at a time; ends where zlib finds the stream's end
    or an error (qpdf, which decodes with zlib too, stops there as well)."""
    inflater = zlib.decompressobj()
    try:
        for data in chunks:
            while True:
                out = inflater.decompress(data, CHUNK_BYTES)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if inflater.eof:
                    return
                if not data and len(out) < CHUNK_BYTES:
                    break
        tail = inflater.flush()
        if tail:
            yield tail
    except zlib.error:
        return


def _lzw(chunks: Iterable[bytes], parms: Dictionary | None) -> Iterator[bytes]:
    """LZWDecode (PDF 32000-1 §7.4.4), honouring /EarlyChange (default 1)."""
    early = parms.get("/EarlyChange", 1) if isinstance(parms, Dictionary) else 1
    early = 0 if early == 0 else 1
    table: list[bytes] = [bytes([value]) for value in range(256)] + [b"", b""]
    width, buffer, held, previous = 9, 0, 0, None
    out = bytearray()
    for chunk in chunks:
        for byte in chunk:
            buffer, held = (buffer << 8) | byte, held + 8
            while held >= width:
                held -= width
                code = (buffer >> held) & ((1 << width) - 1)
                if code == 256:
                    del table[258:]
                    width, previous = 9, None
                    continue
                if code == 257:
                    yield bytes(out)
                    return
                if code < len(table) and (previous is not None or code < 256):
                    entry = table[code]
                    if previous is not None and len(table) < 4096:
                        table.append(previous + entry[:1])
                elif code == len(table) and previous is not None:
                    entry = previous + previous[:1]
                    table.append(entry)
                else:
                    yield bytes(out)
                    return  # not LZW data: qpdf stops too
                out += entry
                previous = entry
                width = 9 if len(table) + early < 512 else 10 if len(table) + early < 1024 else \
                    11 if len(table) + early < 2048 else 12
                if len(out) >= CHUNK_BYTES:
                    yield bytes(out)
                    out.clear()
            buffer &= (1 << held) - 1
    yield bytes(out)


_WHITESPACE = b" \t\r\n\f\x00"


def _ascii_hex(chunks: Iterable[bytes], _parms: Dictionary | None) -> Iterator[bytes]:
    """ASCIIHexDecode: two hex digits a byte, whitespace ignored, ``>`` ends it."""
    carry = b""
    try:
        for chunk in chunks:
            end = chunk.find(b">")
            data = carry + (chunk if end < 0 else chunk[:end]).translate(None, _WHITESPACE)
            cut = len(data) & ~1
            yield binascii.unhexlify(data[:cut])
            carry = data[cut:]
            if end >= 0:
                break
        if carry:
            yield binascii.unhexlify(carry + b"0")
    except (binascii.Error, ValueError):
        return


def _ascii85(chunks: Iterable[bytes], _parms: Dictionary | None) -> Iterator[bytes]:
    """ASCII85Decode: five characters make four bytes, ``z`` four zero bytes, ``~>`` ends it."""
    carry = b""
    try:
        for chunk in chunks:
            end = chunk.find(b"~")
            data = carry + (chunk if end < 0 else chunk[:end]).translate(None, _WHITESPACE)
            after_z = len(data) - data.rfind(b"z") - 1  # a group never spans a ``z``
            cut = len(data) - after_z % 5
            yield base64.a85decode(data[:cut])
            carry = data[cut:]
            if end >= 0:
                break
        if carry:
            yield base64.a85decode(carry)
    except ValueError:
        return


def _run_length(chunks: Iterable[bytes], _parms: Dictionary | None) -> Iterator[bytes]:
    """RunLengthDecode (§7.4.5): a length byte, then 1–128 literal bytes or one byte repeated 2–128 times."""
    carry = b""
    for chunk in chunks:
        data, at, out = carry + chunk, 0, bytearray()
        while at < len(data):
            length = data[at]
            if length == 128:
                yield bytes(out)
                return
            if length < 128:
                if at + length + 2 > len(data):
                    break
                out += data[at + 1 : at + length + 2]
                at += length + 2
            else:
                if at + 2 > len(data):
                    break
                out += data[at + 1 : at + 2] * (257 - length)
                at += 2
            if len(out) >= CHUNK_BYTES:
                yield bytes(out)
                out = bytearray()
        yield bytes(out)
        carry = data[at:]


def _passed_through(chunks: Iterable[bytes], _parms: Dictionary | None) -> Iterator[bytes]:
    """/Crypt: qpdf has decrypted the data already when it hands over the raw bytes."""
    yield from chunks


#: The general-purpose filters by name (and the abbreviations of §8.9.7, which qpdf also accepts).
_STAGES = {
    "/FlateDecode": _inflate, "/Fl": _inflate,
    "/LZWDecode": _lzw, "/LZW": _lzw,
    "/ASCIIHexDecode": _ascii_hex, "/AHx": _ascii_hex,
    "/ASCII85Decode": _ascii85, "/A85": _ascii85,
    "/RunLengthDecode": _run_length, "/RL": _run_length,
    "/Crypt": _passed_through,
}
#: Most bytes a deflate stream inflates to per byte of it: a match of 258 bytes coded in 2 bits (a 1-bit
#: length code and a 1-bit distance code, RFC 1951 §3.2.5), 129 bytes a bit.
DEFLATE_MOST_BYTES_PER_BYTE = 1032
#: Longest string one LZW code stands for (bytes): a 4,096-entry table grows by one byte an entry.
LZW_LONGEST_CODE_BYTES = 4096

#: The most each general-purpose filter decodes ``n`` bytes of input to, without decoding them: its
#: best compression ratio (every code of LZW is at least 9 bits; ASCII85's ``z`` is one character for
#: four bytes; RunLength repeats one byte 128 times for two).
_MOST_BYTES = {
    "/FlateDecode": lambda n: DEFLATE_MOST_BYTES_PER_BYTE * n, "/Fl": lambda n: DEFLATE_MOST_BYTES_PER_BYTE * n,
    "/LZWDecode": lambda n: LZW_LONGEST_CODE_BYTES * n, "/LZW": lambda n: LZW_LONGEST_CODE_BYTES * n,
    "/ASCIIHexDecode": lambda n: n // 2 + 1, "/AHx": lambda n: n // 2 + 1,
    "/ASCII85Decode": lambda n: 4 * n, "/A85": lambda n: 4 * n,
    "/RunLengthDecode": lambda n: 64 * n, "/RL": lambda n: 64 * n,
    "/Crypt": lambda n: n,
}
#: Image codecs: the decoded size is the image's samples, not something the engine decodes.
_IMAGE_CODECS = frozenset({"/DCTDecode", "/DCT", "/JPXDecode", "/JBIG2Decode", "/CCITTFaxDecode", "/CCF"})
#: Components of the colour spaces given by name (§8.6).
_COMPONENTS = {"/DeviceGray": 1, "/G": 1, "/CalGray": 1, "/DeviceRGB": 3, "/RGB": 3, "/CalRGB": 3, "/Lab": 3,
               "/DeviceCMYK": 4, "/CMYK": 4, "/Indexed": 1, "/I": 1, "/Separation": 1, "/Pattern": 1}


def _components(colour_space: object) -> int:
    if isinstance(colour_space, Name):
        return _COMPONENTS.get(str(colour_space), DEFAULT_COMPONENTS)
    if isinstance(colour_space, Array) and len(colour_space) > 0:
        family = str(colour_space[0])
        if family == "/ICCBased" and len(colour_space) > 1 and isinstance(colour_space[1], pikepdf.Stream):
            count = colour_space[1].get("/N")
            return int(count) if isinstance(count, int) and 0 < count <= 32 else DEFAULT_COMPONENTS
        if family == "/DeviceN" and len(colour_space) > 1 and isinstance(colour_space[1], Array):
            return max(1, len(colour_space[1]))
        return _COMPONENTS.get(family, DEFAULT_COMPONENTS)
    return DEFAULT_COMPONENTS


def _jpeg_frame_bytes(head: bytes) -> int:
    """Sample bytes of the JPEG frame whose header (SOFn, ITU T.81 §B.2.2) is in ``head``, or 0."""
    at = 2 if head[:2] == b"\xff\xd8" else 0
    while at + 4 <= len(head):
        if head[at] != 0xFF:
            return 0
        marker = head[at + 1]
        if marker == 0xFF:
            at += 1
            continue
        length = int.from_bytes(head[at + 2 : at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            frame = head[at + 4 : at + 10]
            if len(frame) < 6:
                return 0
            precision, height, width, components = frame[0], int.from_bytes(frame[1:3], "big"), \
                int.from_bytes(frame[3:5], "big"), frame[5]
            return height * width * components * max(1, precision // 8)
        at += 2 + length
    return 0


def _image_bytes(entries: dict[str, object], codec: str, head: bytes) -> int:
    """What the image codec ``codec`` decodes ``stream`` to: its rows of samples as the dictionary
    declares them (/Width, /Height, the colour space's components, /BitsPerComponent), and for a JPEG
    its own frame when that is larger (the decoder fills the frame its header names).

    Raises:
        _Unbounded: no usable /Width or /Height (and, for a JPEG, no frame header).
    """
    width, height = entries.get("/Width"), entries.get("/Height")
    if codec in ("/JBIG2Decode", "/CCITTFaxDecode", "/CCF") or entries.get("/ImageMask") is True:
        components, bits = 1, 1
    else:
        declared_bits = entries.get("/BitsPerComponent", 8)
        bits = declared_bits if isinstance(declared_bits, int) and 0 < declared_bits <= 16 else 8
        components = _components(entries.get("/ColorSpace"))  # JPX may leave it out: DEFAULT_COMPONENTS
    declared = 0
    if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
        declared = height * ((width * components * bits + 7) // 8)
    frame = _jpeg_frame_bytes(head) if codec in ("/DCTDecode", "/DCT") else 0
    if not declared and not frame:
        raise _Unbounded(f"image codec {codec} without a /Width and /Height")
    return max(declared, frame)


def _entries(stream: pikepdf.Stream) -> dict[str, object]:
    """The entries of ``stream``'s dictionary, read at once (pikepdf's ``get`` of an absent key costs
    several times a whole ``items()``); looked up with ``dict.get``, an absent or null entry is None,
    as pikepdf's ``get`` gives it."""
    return dict(stream.stream_dict.items())


def _filters(entries: dict[str, object]) -> list[tuple[str, Dictionary | None]]:
    """The stream's filters (``entries``: its dictionary) in the order they decode, each with its
    /DecodeParms (or None)."""
    filters = entries.get("/Filter")
    names = [filters] if isinstance(filters, Name) else list(filters) if isinstance(filters, Array) else []
    parms = entries.get("/DecodeParms")
    parm_list: list[object] = list(parms) if isinstance(parms, Array) else [parms] * len(names)
    parm_list += [None] * (len(names) - len(parm_list))
    return [(str(name), parm if isinstance(parm, Dictionary) else None) for name, parm in zip(names, parm_list)]


def _raw_chunks(raw: bytes) -> Iterator[bytes]:
    view = memoryview(raw)
    for at in range(0, len(raw), CHUNK_BYTES):
        yield bytes(view[at : at + CHUNK_BYTES])


# --- operators -----------------------------------------------------------------------------------

#: What holds no operator: strings (one level of nested parentheses read whole), comments and hex
#: strings (PDF 32000-1 §7.2–7.3); each becomes a space before operators are counted.
_NOT_OPERATORS = re.compile(rb"\((?:[^()\\]|\\.|\((?:[^()\\]|\\.)*\))*\)|%[^\r\n]*|<[0-9A-Fa-f\s]*>", re.S)


def _character_classes() -> bytes:
    """A ``bytes.translate`` table: white space and delimiters to a space, the characters an operator
    starts with (letters, ``'``, ``"``) to ``a``, ``/`` (a name) to itself, anything else to ``0``."""
    table = bytearray(b"0" * 256)
    for character in b" \t\r\n\f\x00()<>[]{}":
        table[character] = ord(" ")
    for character in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'\"":
        table[character] = ord("a")
    table[ord("/")] = ord("/")
    return bytes(table)


_CLASSES = _character_classes()


def _operators(data: bytes) -> int:
    """The operators in ``data`` (whole tokens): every token that starts with a letter or a quote
    (§8.2, Table 51: no operand does; ``true``, ``false`` and ``null`` count too, and inline image
    data is read as tokens, so a few too many at most). C-speed string operations only: about
    60 MB/s of text-heavy content, faster without strings."""
    if b"(" in data or b"%" in data or b"<" in data:  # memchr: content without them skips the regex
        data = _NOT_OPERATORS.sub(b" ", data)
    classes = data.translate(_CLASSES)
    return classes.count(b" a") + (classes[:1] == b"a")


class _OperatorCount:
    """Operators of a content stream fed in chunks, cut at whitespace; raises _Over past ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.count = 0
        self._carry = b""

    def feed(self, chunk: bytes) -> None:
        data = self._carry + chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"), data.rfind(b" "))
        if cut < 0 and len(data) < 4 * CHUNK_BYTES:
            self._carry = data
            return
        cut = len(data) - 1 if cut < 0 else cut
        self._add(_operators(data[: cut + 1]))
        self._carry = data[cut + 1 :]

    def finish(self) -> int:
        self._add(_operators(self._carry))
        self._carry = b""
        return self.count

    def _add(self, count: int) -> None:
        self.count += count
        if self.count > self.cap:
            raise _Over(self.count, operators=True)


def most_decoded(stream: pikepdf.Stream, entries: dict[str, object]) -> int | None:
    """The most bytes any stage of :func:`measure` can count for ``stream``, from its raw length and
    filters alone (:data:`_MOST_BYTES`), nothing decoded; None when a filter is an image codec or one
    the engine cannot decode, or the raw data cannot be read (:func:`measure` then says which);
    ``entries``: the stream's dictionary (:func:`_entries`)."""
    filters = _filters(entries)
    try:
        most = len(stream.read_raw_bytes())
    except (pikepdf.PdfError, pikepdf.QpdfRuntimeError):
        return None
    for name, _parms in filters:
        grow = _MOST_BYTES.get(name)
        if grow is None:
            return None
        most = max(most, grow(most))  # each stage is capped: the largest stage output counts
    return most


def _measure_small(raw: bytes, inflate: bool, bytes_cap: int, operators_cap: int | None) -> tuple[int, int, bool]:
    """:func:`measure` of a stream whose raw data is one chunk (at most CHUNK_BYTES) and that is
    unfiltered or one /FlateDecode without /DecodeParms: the same stages, caps and counts, the
    pieces handed on without generators. Returns ``(decoded bytes, operators, read whole)``; read
    whole: unfiltered, or inflated to zlib's end of stream (its checksum matched)."""
    counter = _OperatorCount(operators_cap) if operators_cap is not None else None
    size = 0
    if not inflate:
        if raw:
            size = len(raw)
            if size > bytes_cap:
                raise _Over(size)
            if counter is not None:
                counter.feed(raw)
        whole = True
    else:
        whole = False
        inflater = zlib.decompressobj()
        try:
            data = raw
            while data:  # as :func:`_inflate` over the one chunk
                out = inflater.decompress(data, CHUNK_BYTES)
                if out:
                    size += len(out)
                    if size > bytes_cap:
                        raise _Over(size)
                    if counter is not None:
                        counter.feed(out)
                data = inflater.unconsumed_tail
                if inflater.eof:
                    whole = True
                    break
                if not data and len(out) < CHUNK_BYTES:
                    break
            if not whole:
                tail = inflater.flush()
                if tail:
                    size += len(tail)
                    if size > bytes_cap:
                        raise _Over(size)
                    if counter is not None:
                        counter.feed(tail)
        except zlib.error:
            pass  # zlib stopped where qpdf stops too; the damage check decodes it with qpdf
    if counter is None:
        return size, 0, whole
    operators = counter.finish()
    if operators > counter.cap:
        raise _Over(operators, operators=True)
    return size, operators, whole


_FLATE_ONLY = [("/FlateDecode", None)]


def measure(stream: pikepdf.Stream, bytes_cap: int, operators_cap: int | None,
            entries: dict[str, object] | None = None) -> tuple[int, int]:
    """Decode ``stream`` in pieces, counting; nothing of it is kept.

    Args:
        stream: the stream (its raw data is read whole: it is part of the input file).
        bytes_cap: most decoded bytes allowed, checked after every filter of the chain.
        operators_cap: most operators allowed, or None for a stream that is not content.
        entries: the stream's dictionary (:func:`_entries`), when read already.

    Returns:
        ``(decoded bytes, operators)``; operators 0 when not counted. Behind a PNG or TIFF predictor
        the bytes are those before the predictor (at least as many) and the operators are bounded as
        half of them (a one-letter operator and a separator).

    Raises:
        _Over: past a cap (``produced``: where it stopped); _Unbounded: cannot be bounded.
        pikepdf.PdfError: qpdf cannot read the raw data.
    """
    return _measure(stream, bytes_cap, operators_cap, entries)[:2]


def _measure(stream: pikepdf.Stream, bytes_cap: int, operators_cap: int | None,
             entries: dict[str, object] | None = None) -> tuple[int, int, bool]:
    """:func:`measure`, and whether the stream was read whole (:func:`_measure_small`)."""
    entries = _entries(stream) if entries is None else entries
    filters = _filters(entries)
    raw = stream.read_raw_bytes()
    if len(raw) <= CHUNK_BYTES and (not filters or filters == _FLATE_ONLY):
        return _measure_small(raw, bool(filters), bytes_cap, operators_cap)
    chunks: Iterable[bytes] = _capped(_raw_chunks(raw), bytes_cap) if not filters else _raw_chunks(raw)
    exact = True
    for index, (name, parms) in enumerate(filters):
        if name in _IMAGE_CODECS:
            if index != len(filters) - 1:
                raise _Unbounded(f"image codec {name} followed by another filter")
            head = b""
            for chunk in chunks:  # the codec's input: bounded by the stages before it
                head += chunk[: JPEG_HEADER_WINDOW_BYTES - len(head)]
            size = _image_bytes(entries, name, head)
            if size > bytes_cap:
                raise _Over(size)
            return size, 0, False
        stage = _STAGES.get(name)
        if stage is None:
            raise _Unbounded(f"filter {name}, which the engine cannot decode")
        predictor = parms.get("/Predictor") if parms is not None else None
        if isinstance(predictor, int) and predictor > 1:
            exact = False
        chunks = _capped(stage(chunks, parms), bytes_cap)
    size = 0
    counter = _OperatorCount(operators_cap) if operators_cap is not None and exact else None
    for chunk in chunks:
        size += len(chunk)
        if counter is not None:
            counter.feed(chunk)
    if operators_cap is None:
        return size, 0, False
    operators = counter.finish() if counter is not None else (size + 1) // 2
    if operators > operators_cap:
        raise _Over(operators, operators=True)
    return size, operators, False


# --- which streams count ---------------------------------------------------------------------------

#: What can hold a stream or lead to one.
_CONTAINERS = (Dictionary, Array, pikepdf.Stream)
#: The Python type of every PDF object pikepdf hands over as an object (numbers and booleans come as
#: Python values): a cheap first test before the dearer ``isinstance`` of its PDF type.
_OBJECT = pikepdf.Object
#: The object number and generation pikepdf gives a direct object.
_DIRECT = (0, 0)
#: Entries whose values are content streams, or dictionaries of them: annotation appearances
#: (§12.5.5, with their appearance states) and Type 3 glyph descriptions (§9.6.5).
_CONTENT_KEYS = ("/AP", "/CharProcs")


_FORM, _IMAGE = Name.Form, Name.Image


def _is_content(entries: dict[str, object]) -> bool:
    """A form XObject or a tiling pattern (``entries``: the stream's dictionary): a content stream of
    its own (§8.10, §8.7.3)."""
    return entries.get("/Subtype") == _FORM or entries.get("/PatternType") == 1


def _kind(entries: dict[str, object], content: bool) -> str:
    subtype = entries.get("/Subtype")
    if subtype == _FORM:
        return "a form XObject"
    if subtype == _IMAGE:
        return "an image"
    return "a content stream" if content else "a stream"


def _name(entries: dict[str, object], content: bool, key: tuple[int, int] | None) -> str:
    """A stream in a message: its kind and, for an indirect one, its object number."""
    return _kind(entries, content) + (f" (object {key[0]} {key[1]})" if key else "")


class _Meter:
    """The walk over what the plate can carry, with the job's running totals.

    A stream that is not content and that fits the budget by :func:`most_decoded` alone is not
    decoded: it waits in ``_pending``, counted at its most, and is measured only if a later count would
    not fit with the pending ones at their most (:meth:`_settle`, in walk order). Each stream is then
    measured with the same caps and totals as if every stream were measured in turn, so the same
    input is refused by the same stream with the same message; the rest is never decoded.
    """

    def __init__(self, budget: ContentBudget, path: Path) -> None:
        self.budget = budget
        self.path = path
        self.decoded_bytes = 0
        self.operators = 0
        self.streams = 0
        self.where = ""
        self._seen: set[tuple[int, int]] = set()
        self._measured: dict[tuple[int, int], tuple[int, int]] = {}
        #: Streams counted at their most, not measured yet: (stream, its dictionary, its name in
        #: messages, where it was met).
        self._pending: list[tuple[pikepdf.Stream, dict[str, object], str | None, str]] = []
        self._pending_bytes = 0
        self._pending_keys: set[tuple[int, int]] = set()
        #: Content streams read whole (:attr:`ContentUse.read_whole`).
        self.read_whole: set[tuple[int, int]] = set()

    def _refuse(self, what: str, produced: int, setting: str, limit: int, unit: str) -> ContentTooLarge:
        return ContentTooLarge(f"{self.path.name}: {self.where}{what} holds more than {setting}={limit} {unit} "
                               f"(refused after {produced} {unit})")

    def stream(self, stream: pikepdf.Stream, content: bool, *, stream_bytes_left: int | None = None,
               stream_operators_left: int | None = None, what: str | None = None,
               may_wait: bool = True, entries: dict[str, object] | None = None) -> tuple[int, int]:
        """Measure ``stream`` once (by object), add it to the job's totals; returns ``(bytes, operators)``,
        the bytes at their most for a stream left pending (``may_wait``: see the class). ``entries``:
        the stream's dictionary, when read already (:func:`_entries`)."""
        key = stream.objgen if stream.is_indirect else None
        if key is not None and key in self._pending_keys:
            self._settle()
        if key is not None and key in self._measured:
            return self._measured[key]
        budget = self.budget
        per_stream_bytes = budget.max_decoded_bytes_per_stream if stream_bytes_left is None else stream_bytes_left
        per_stream_operators = budget.max_content_operators_per_stream if stream_operators_left is None \
            else stream_operators_left
        job_bytes_left = budget.max_decoded_bytes_per_job - self.decoded_bytes - self._pending_bytes
        entries = _entries(stream) if entries is None else entries
        if may_wait and not content:
            most = most_decoded(stream, entries)
            if most is not None and most <= min(per_stream_bytes, job_bytes_left):
                self._pending.append((stream, entries, what, self.where))
                self._pending_bytes += most
                self.streams += 1
                if key is not None:
                    self._pending_keys.add(key)
                return most, 0
        job_operators_left = budget.max_content_operators_per_job - self.operators
        bytes_cap = min(per_stream_bytes, job_bytes_left)
        operators_cap = min(per_stream_operators, job_operators_left) if content else None
        try:
            size, operators, whole = _measure(stream, bytes_cap, operators_cap, entries)
        except _Over as over:
            counting_bytes = not over.operators
            if counting_bytes and self._pending and job_bytes_left < per_stream_bytes:
                # the job's cap was lowered by the streams counted at their most: measure them, then this
                self._settle()
                return self.stream(stream, content, stream_bytes_left=stream_bytes_left,
                                   stream_operators_left=stream_operators_left, what=what, may_wait=False,
                                   entries=entries)
            name = what or _name(entries, content, key)
            if counting_bytes and per_stream_bytes <= job_bytes_left:
                raise self._refuse(name, over.produced, "max_decoded_bytes_per_stream",
                                   budget.max_decoded_bytes_per_stream, "decoded bytes") from None
            if counting_bytes:
                raise self._refuse(f"{name}, with the streams before it,", self.decoded_bytes + over.produced,
                                   "max_decoded_bytes_per_job", budget.max_decoded_bytes_per_job,
                                   "decoded bytes") from None
            if per_stream_operators <= job_operators_left:
                raise self._refuse(name, over.produced, "max_content_operators_per_stream",
                                   budget.max_content_operators_per_stream, "operators") from None
            raise self._refuse(f"{name}, with the content before it,", self.operators + over.produced,
                               "max_content_operators_per_job", budget.max_content_operators_per_job,
                               "operators") from None
        except _Unbounded as unbounded:
            name = what or _name(entries, content, key)
            raise ContentTooLarge(
                f"{self.path.name}: {self.where}{name} cannot be held to max_decoded_bytes_per_stream="
                f"{budget.max_decoded_bytes_per_stream}: it uses {unbounded}"
            ) from None
        except (pikepdf.PdfError, pikepdf.QpdfRuntimeError):
            size, operators = 0, 0  # unreadable: the damage check names it (imposition.engine.source.content_damage)
        else:
            if whole and content and key is not None:
                self.read_whole.add(key)
        self.decoded_bytes += size
        self.operators += operators
        self.streams += 1
        if key is not None:
            self._measured[key] = (size, operators)
        return size, operators

    def page_contents(self, contents: pikepdf.Object | None) -> None:
        """A page's /Contents: one stream, or an array whose streams count as one (§7.8.2: they are
        read as if concatenated)."""
        parts = list(contents) if isinstance(contents, Array) else [contents]
        streams = [part for part in parts if isinstance(part, pikepdf.Stream)]
        if len(streams) == 1 and not isinstance(contents, Array):
            # the stream becomes the page's form as it is: what its dictionary reaches is copied too
            self.walk([(streams[0], True)], what="its content stream")
            return
        budget = self.budget
        total_bytes = total_operators = 0
        for index, part in enumerate(streams):
            name = f"its content ({len(streams)} streams, up to part {index + 1})"
            if part.is_indirect and part.objgen in self._pending_keys:
                self._settle()
            if part.is_indirect and part.objgen in self._measured:
                # measured before (another page, or twice in this array): the engine concatenates
                # the parts into a new stream of this page's, so they count again
                size, operators = self._measured[part.objgen]
                self._charge(size, operators, name)
            else:
                size, operators = self.stream(
                    part, True, what=name, stream_bytes_left=budget.max_decoded_bytes_per_stream - total_bytes,
                    stream_operators_left=budget.max_content_operators_per_stream - total_operators,
                )
            total_bytes += size
            total_operators += operators
            if total_bytes > budget.max_decoded_bytes_per_stream:
                raise self._refuse(name, total_bytes, "max_decoded_bytes_per_stream",
                                   budget.max_decoded_bytes_per_stream, "decoded bytes")
            if total_operators > budget.max_content_operators_per_stream:
                raise self._refuse(name, total_operators, "max_content_operators_per_stream",
                                   budget.max_content_operators_per_stream, "operators")
            if part.is_indirect:
                self._seen.add(part.objgen)

    def _settle(self) -> None:
        """Measure every pending stream, in the order they were met, each where it was met."""
        pending, where = self._pending, self.where
        self._pending, self._pending_bytes, self._pending_keys = [], 0, set()
        for stream, entries, what, self.where in pending:
            self.streams -= 1
            self.stream(stream, False, what=what, may_wait=False, entries=entries)
        self.where = where

    def _charge(self, size: int, operators: int, name: str) -> None:
        """Add a stream measured before to the job's totals again; raises past a job limit."""
        budget = self.budget
        if self._pending and self.decoded_bytes + self._pending_bytes + size > budget.max_decoded_bytes_per_job:
            self._settle()
        self.decoded_bytes += size
        self.operators += operators
        if self.decoded_bytes > budget.max_decoded_bytes_per_job:
            raise self._refuse(f"{name}, with the streams before it,", self.decoded_bytes,
                               "max_decoded_bytes_per_job", budget.max_decoded_bytes_per_job, "decoded bytes")
        if self.operators > budget.max_content_operators_per_job:
            raise self._refuse(f"{name}, with the content before it,", self.operators,
                               "max_content_operators_per_job", budget.max_content_operators_per_job, "operators")

    def walk(self, pending: list[tuple[pikepdf.Object | None, bool]], what: str | None = None) -> None:
        """Measure every stream reachable from ``pending`` (``(object, content)`` pairs: ``content``
        marks the streams, and the values of a dictionary, that are content streams; an object that
        is no container, None included, is skipped); ``what`` names the first one in messages."""
        seen = self._seen
        containers: list[tuple[pikepdf.Object, bool]] = [
            (obj, content) for obj, content in pending if isinstance(obj, _OBJECT) and isinstance(obj, _CONTAINERS)]
        while containers:  # only containers are pushed
            obj, content = containers.pop()
            objgen = obj.objgen
            if objgen != _DIRECT:
                if objgen in seen:
                    continue
                seen.add(objgen)
            if isinstance(obj, pikepdf.Stream):
                entries = _entries(obj)
                self.stream(obj, content or _is_content(entries), what=what, entries=entries)
                what = None
                for value in entries.values():
                    if isinstance(value, _OBJECT) and isinstance(value, _CONTAINERS):
                        containers.append((value, False))
            elif isinstance(obj, Dictionary):
                for key, value in obj.items():
                    if isinstance(value, _OBJECT) and isinstance(value, _CONTAINERS):
                        containers.append((value, content or key in _CONTENT_KEYS))
            else:
                for value in obj:
                    if isinstance(value, _OBJECT) and isinstance(value, _CONTAINERS):
                        containers.append((value, content))


def check_content_budget(pdf: pikepdf.Pdf, budget: ContentBudget, path: Path,
                         pages: Sequence[SourcePage] | None = None) -> ContentUse:
    """Measure every stream the plate can carry against ``budget``; raise at the first one past it.

    Counted, each object once: every page's content, its resources (inherited ones too) and group
    with everything they reach (forms, images, fonts, patterns, shadings, colour profiles, soft
    masks…), the appearance streams of its annotations with what they reach, the catalog's output
    intents and the interactive form's default resources. Nothing else of the input reaches a plate
    (:func:`imposition.engine.drawing.draw_plan` keeps only these), so a stream no page reaches is neither
    decoded nor copied. Only raw stream data is read: qpdf decodes nothing here (and warns of nothing
    that :func:`imposition.engine.source.content_damage` should hear about). ``pages``: the pages of ``pdf``,
    read already (:func:`imposition.engine.source.read_pages`).

    Returns:
        What was counted.

    Raises:
        ContentTooLarge: ``content_too_large``, naming the page, the stream, the setting and its limit.
    """
    meter = _Meter(budget, path)
    for number, page in enumerate(read_pages(pdf) if pages is None else pages, start=1):
        meter.where = f"page {number}: "
        meter.page_contents(page.get("/Contents"))
        pending: list[tuple[pikepdf.Object | None, bool]] = [(page.resources, False), (page.get("/Group"), False)]
        annotations = page.get("/Annots")
        if isinstance(annotations, Array):
            pending.extend((annotation.get("/AP"), True) for annotation in annotations
                           if isinstance(annotation, Dictionary))
        meter.walk(pending)
    meter.where = "the catalog: "
    root = pdf.Root
    acro_form = root.get("/AcroForm")
    meter.walk([(root.get("/OutputIntents"), False),
                (acro_form.get("/DR") if isinstance(acro_form, Dictionary) else None, False)])
    return ContentUse(meter.decoded_bytes + meter._pending_bytes, meter.operators, meter.streams,
                      frozenset(meter.read_whole))
