"""Drawing an imposition plan with pikepdf (qpdf); runs in the engine's child process.

Each source page becomes one Form XObject (PDF 32000-1 §8.10) made from its own content and its own
/Resources, so two pages that both name an image ``/Im0`` keep their own image, and a content
stream that leaves the graphics state unbalanced cannot leak: the ``Do`` operator saves and
restores the graphics state around a form (§8.10.1), and each placement is wrapped in ``q … Q``.
The form's /BBox is the page's visible region (CropBox ∩ MediaBox) in its own user space, so only
what a viewer shows can appear, positioned by its own origin; on the sheet each placement is
clipped to its trim plus the bleed it keeps (qpdf's own page-to-form helper clips to the TrimBox,
which would lose the bleed). /Rotate and /UserUnit are folded into the placement matrix.

What prints is what the press should print: content that the document's default optional-content
configuration hides is removed first (:mod:`imposition.engine.visibility`); then the annotations that print
(the Print flag set, neither Hidden nor NoView) are flattened, their appearance streams merged into
the page content after generating missing appearances of form fields; the others are left out with
the page objects. A PDF/X output intent (/OutputIntents) is kept on the plate's catalog.

The plan is drawn into the source document itself, never copied into a new one: its page tree is
emptied, its catalog keeps nothing but the page tree (no outlines, forms, labels or metadata of the
source), and the plates become its pages. ``save`` writes only the objects the plates reach, and
writes the content streams and images it reaches straight from the input file, still compressed.
Copying between documents (qpdf's foreign-object copy, the dearest step of a plain page copy) never
happens. A page's content stream becomes its form in place when only one form needs it; pages that
share a content stream, resources and boxes share one form. Plates whose operators are the same
byte for byte share one content stream.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

import pikepdf
from pikepdf import Array, Dictionary, Name

from .errors import DamagedPdf, shown
from .geometry import PageBoxes, Rect
from .marks import (
    REGISTRATION_COLOUR_SPACE, SLUG_FONT, marks_operators, patches_operators, slug_operators, targets_operators,
)
from .planning import ImpositionPlan, Placement, Plate
from .source import inherited
from .visibility import hide_optional_content

#: Catalog entries kept when the source becomes the plate file: the page tree, and the output intent
#: (PDF 32000-1 §14.11.5: the press condition a PDF/X file is made for).
KEPT_CATALOG_KEYS = frozenset({"/Type", "/Pages", "/OutputIntents"})
#: Entries kept on the root of the page tree: nothing a plate could inherit (/Resources, /Rotate…).
KEPT_PAGE_TREE_KEYS = frozenset({"/Type", "/Kids", "/Count"})
#: Trailer entries kept: the catalog, the object count and the /ID qpdf rewrites, and the encryption
#: qpdf still decrypts the input with (the plate is written unencrypted). Anything else of the
#: source's trailer (/Info, entries of its own) would be copied into the plate's.
KEPT_TRAILER_KEYS = frozenset({"/Root", "/Size", "/ID", "/Encrypt"})

#: The /ID string qpdf writes when saving with ``static_id`` (QPDFWriter::generateID), as hex: the
#: plate's is then replaced by a digest of the file (:func:`save_plate`).
STATIC_ID_HEX = b"31415926535897932384626433832795"
#: How far from its end a plate's trailer is looked for (bytes): qpdf writes the trailer, or the
#: cross-reference stream's dictionary, last, with /ID as its last entry.
TRAILER_WINDOW_BYTES = 64 * 1024
_ID_ENTRY = re.compile(rb"/ID \[<([0-9a-f]*)><(" + STATIC_ID_HEX + rb")>\] >>")
_START_XREF = re.compile(rb"startxref\s+(\d+)\s+%%EOF\s*$")

#: What a page's /Contents may be (PDF 32000-1 Table 30).
_CONTENTS_KINDS = (pikepdf.Stream, Array)

# Names made once: pikepdf builds a new Name object on every ``Name.X`` lookup.
_TYPE, _SUBTYPE, _BBOX, _RESOURCES, _GROUP = Name.Type, Name.Subtype, Name.BBox, Name.Resources, Name.Group
_CONTENTS, _XOBJECT, _FORM = Name.Contents, Name.XObject, Name.Form


def _number(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def _identity(obj: object) -> tuple | None:
    """The object number and generation of an indirect object, else None (a direct object, or a
    number pikepdf hands over as a Python value)."""
    if not isinstance(obj, pikepdf.Object) or not obj.is_indirect:
        return None
    return obj.objgen


def _page_entry(page: pikepdf.Dictionary, key: str, kinds: tuple[type, ...], page_index: int,
                what: str) -> pikepdf.Object | None:
    """``page[key]`` (None when absent or null), checked to be one of ``kinds``.

    Raises:
        DamagedPdf: the entry is of another type (``/Contents 7``), naming the 1-based page.
    """
    value = page[key] if key in page else None  # pikepdf's get() of an absent key is slow
    if value is None or isinstance(value, kinds):
        return value
    raise DamagedPdf(f"page {page_index + 1}: {key} is {shown(value)}, not {what}")


class _Forms:
    """The Form XObjects of the source pages, made in the source document itself."""

    def __init__(self, source: pikepdf.Pdf, boxes: list[PageBoxes]) -> None:
        self.source = source
        self.boxes = boxes
        self.pages = list(source.pages)
        self._claimed_streams: set[tuple[int, int]] = set()
        self._bboxes: dict[tuple[float, float, float, float], Array] = {}

    def forms_of(self, page_indexes: list[int]) -> dict[int, pikepdf.Object]:
        """The Form XObject of each page in ``page_indexes`` (0-based); pages that share content,
        resources, group and visible region share one."""
        by_key: dict[tuple, pikepdf.Object] = {}
        forms: dict[int, pikepdf.Object] = {}
        for page_index in page_indexes:
            page = self.pages[page_index].obj
            crop = self.boxes[page_index].crop
            contents = _page_entry(page, "/Contents", _CONTENTS_KINDS, page_index,
                                   "a content stream or an array of them")
            resources = inherited(page, "/Resources")
            if resources is not None and not isinstance(resources, Dictionary):
                raise DamagedPdf(f"page {page_index + 1}: /Resources is {shown(resources)}, not a dictionary")
            group = _page_entry(page, "/Group", (Dictionary,), page_index, "a group attributes dictionary")
            key = (
                _identity(contents) or ("page", page_index),
                _identity(resources) or ("page", page_index),
                (crop.x0, crop.y0, crop.x1, crop.y1),
                _identity(group),
            )
            form = by_key.get(key)
            if form is None:
                form = by_key[key] = self._make(contents, resources, group, key[2])
            forms[page_index] = form
        return forms

    def _make(self, contents: pikepdf.Object | None, resources: pikepdf.Object | None,
              group: pikepdf.Object | None, bbox: tuple[float, float, float, float]) -> pikepdf.Stream:
        form = self._stream_for(contents)
        form[_TYPE] = _XOBJECT
        form[_SUBTYPE] = _FORM
        if bbox not in self._bboxes:
            self._bboxes[bbox] = Array(bbox)
        form[_BBOX] = self._bboxes[bbox]  # one Python handle per distinct box; written inline in each form
        form[_RESOURCES] = resources if resources is not None else Dictionary()
        if group is not None:
            form[_GROUP] = group
        return form

    def _stream_for(self, contents: pikepdf.Object | None) -> pikepdf.Stream:
        """A stream holding the page's content that no other form uses."""
        if isinstance(contents, pikepdf.Stream):
            if contents.is_indirect and contents.objgen not in self._claimed_streams:
                self._claimed_streams.add(contents.objgen)
                return contents  # zero copy: the content stream becomes the form
            stream = pikepdf.Stream(self.source, b"")
            # the stream's own filters, passed through as read (pikepdf type-checks them)
            stream.write(contents.read_raw_bytes(), filter=cast("Name | Array | None", contents.get("/Filter")),
                         decode_parms=cast("Dictionary | Array | None", contents.get("/DecodeParms")))
            return stream
        parts = list(contents) if isinstance(contents, Array) else []
        data = b"\n".join(part.read_bytes() for part in parts if isinstance(part, pikepdf.Stream))
        return pikepdf.Stream(self.source, data)


def _flatten_annotations(source: pikepdf.Pdf) -> None:
    """Merge the appearance of every annotation that prints into its page's content (qpdf's
    flattening in ``print`` mode: the Print flag set, Hidden and NoView not set)."""
    if not any("/Annots" in page.obj for page in source.pages):
        return
    if "/AcroForm" in source.Root:
        source.generate_appearance_streams()
    source.flatten_annotations(mode="print")


def _empty(source: pikepdf.Pdf) -> None:
    """Remove every page from ``source``, every catalog entry but the page tree, and every trailer
    entry but :data:`KEPT_TRAILER_KEYS` (/Info among them).

    Pages are removed from the last: qpdf renumbers the pages after the one it removes, so removing
    from the end costs O(1) each instead of O(pages). The page objects stay in memory (the forms
    were made from their content) but nothing written refers to them any more.
    """
    pages = source.pages
    for page in reversed(list(pages)):
        pages.remove(page)
    for key in [key for key in source.Root.keys() if key not in KEPT_CATALOG_KEYS]:
        del source.Root[key]
    tree = source.Root.Pages
    for key in [key for key in tree.keys() if key not in KEPT_PAGE_TREE_KEYS]:
        del tree[key]
    for key in [key for key in source.trailer.keys() if key not in KEPT_TRAILER_KEYS]:
        del source.trailer[key]


def _placement_operators(placement: Placement, name: str) -> bytes:
    clip: Rect = placement.clip
    matrix = " ".join(_number(v) for v in placement.matrix)
    return (
        f"q {_number(clip.x0)} {_number(clip.y0)} {_number(clip.width)} {_number(clip.height)} re W n "
        f"{matrix} cm {name} Do Q\n"
    ).encode("ascii")


def _form_name(index: int) -> str:
    """The resource name of the ``index``-th placement of a plate (0-based)."""
    return f"/P{index}"


class _Operators:
    """The content-stream operators of plates. A placement (same clip, matrix and name) or a set of
    marks met on an earlier plate is not formatted again: most plates repeat the same geometry."""

    def __init__(self) -> None:
        self._placements: dict[tuple, bytes] = {}
        self._marks: dict[tuple, bytes] = {}

    def of(self, plate: Plate) -> bytes:
        """The content of one plate: its placements, then its marks, registration targets, patches
        (colour bar, collation marks), then its slug line."""
        parts = []
        for index, placement in enumerate(plate.placements):
            key = (placement.clip, placement.matrix, index)
            operators = self._placements.get(key)
            if operators is None:
                operators = self._placements[key] = _placement_operators(placement, _form_name(index))
            parts.append(operators)
        marks = self._marks.get(plate.marks)
        if marks is None:
            marks = self._marks[plate.marks] = marks_operators(plate.marks)
        parts.append(marks)
        parts.append(targets_operators(plate.targets))
        parts.append(patches_operators(plate.patches))
        if plate.slug_line and plate.slug_origin_pt:
            parts.append(slug_operators(plate.slug_line, *plate.slug_origin_pt))
        return b"".join(parts)


def _shared_resources(pdf: pikepdf.Pdf) -> tuple[pikepdf.Object, pikepdf.Object]:
    """The plates' /ColorSpace and /Font resource dictionaries, one indirect object each: the
    registration colour space (/Separation /All, tint 1 = 100 % of every process ink) and the slug
    font (Helvetica, WinAnsiEncoding)."""
    tint = Dictionary(FunctionType=2, Domain=[0, 1], C0=[0, 0, 0, 0], C1=[1, 1, 1, 1], N=1)
    colour_space = pdf.make_indirect(Array([Name.Separation, Name.All, Name.DeviceCMYK, tint]))
    font = pdf.make_indirect(
        Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding)
    )
    return (pdf.make_indirect(Dictionary({REGISTRATION_COLOUR_SPACE: colour_space})),
            pdf.make_indirect(Dictionary({SLUG_FONT: font})))


def draw_plan(source: pikepdf.Pdf, boxes: list[PageBoxes], plan: ImpositionPlan, output_path: Path,
              lap: Callable[[str], None] | None = None) -> None:
    """Draw ``plan`` with the pages of ``source`` (whose boxes are ``boxes``) and save it to ``output_path``;
    ``lap`` (the benchmark's step clock, :class:`imposition.engine.child.Laps`) is told when the forms,
    the plates and the save end.

    ``source`` becomes the plate file: it is changed in place and should be closed afterwards. The
    output is the same bytes for the same input and plan (:func:`save_plate`: the /ID is a digest of
    the content, not of the time), so a fenced-out worker could only rewrite identical bytes.

    Raises:
        DamagedPdf: a page's /Contents, /Resources or /Group is of the wrong type.
        pikepdf.PdfError, pikepdf.QpdfRuntimeError: the source turns out damaged while its objects
            are read or its page tree is emptied (the child maps them to DamagedPdf).
    """
    hide_optional_content(source)
    _flatten_annotations(source)
    used = sorted({placement.page for plate in plan.plates for placement in plate.placements})
    forms = _Forms(source, boxes).forms_of(used)
    if lap is not None:
        lap("forms")
    _empty(source)
    colour_spaces, fonts = _shared_resources(source)
    contents: dict[bytes, pikepdf.Object] = {}
    plate_operators = _Operators()
    for plate in plan.plates:
        operators = plate_operators.of(plate)
        content = contents.get(operators)
        if content is None:
            content = contents[operators] = source.make_stream(operators)
        xobjects = Dictionary({_form_name(index): forms[placement.page]
                               for index, placement in enumerate(plate.placements)})
        # add_blank_page appends in O(1); pages.append counts every page on each call (O(n) each)
        sheet = source.add_blank_page(page_size=(plan.width_pt, plan.height_pt)).obj
        sheet[_RESOURCES] = Dictionary(XObject=xobjects, ColorSpace=colour_spaces, Font=fonts)
        sheet[_CONTENTS] = content
    if lap is not None:
        lap("plates")
    save_plate(source, output_path)
    if lap is not None:
        lap("save (and its /ID digest)")


def save_plate(pdf: pikepdf.Pdf, path: Path) -> None:
    """Save ``pdf`` to ``path`` (unencrypted), its /ID a digest of the file: the same bytes for the same
    input and plan, never the time (the plate upload's fencing relies on it: docs/design.md §4).

    What qpdf's ``deterministic_id`` gives, at a third of its cost: qpdf digests the output with its
    own MD5 (≈ 530 MB/s here); the plate is saved with qpdf's fixed ``static_id`` instead, hashed with
    SHA-256 (hashlib, ≈ 1.4 GB/s), and the fixed second /ID string (and the first when the source had
    no /ID, as qpdf then writes the same string twice) replaced in place by the digest's first 16
    bytes: same length, so no offset moves. qpdf writes /ID as the last entry of the trailer (after the
    cross-reference table, at the end of the file) or of the cross-reference stream's dictionary (at
    the ``startxref`` offset), both small (:func:`_empty` keeps only the entries qpdf needs); should a
    qpdf write it in neither window (:data:`TRAILER_WINDOW_BYTES`), the plate is saved again with
    ``deterministic_id``.
    """
    pdf.save(path, static_id=True, encryption=False)
    with path.open("r+b") as plate:
        digest = hashlib.file_digest(plate, "sha256").hexdigest()[:32].encode("ascii")
        entry_at = _static_id_entry(plate, os.fstat(plate.fileno()).st_size)
        if entry_at is not None:
            for at in entry_at:
                plate.seek(at)
                plate.write(digest)
            return
    pdf.save(path, deterministic_id=True, encryption=False)


def _static_id_entry(plate: BinaryIO, size: int) -> tuple[int, ...] | None:
    """Where in ``plate`` (``size`` bytes) the fixed /ID strings to replace start: the second, and the
    first too when it is the fixed one; None when the /ID entry is not found after ``startxref``'s offset."""
    plate.seek(max(0, size - TRAILER_WINDOW_BYTES))
    tail_at, tail = plate.tell(), plate.read()
    start_xref = _START_XREF.search(tail)
    if start_xref is None:
        return None
    xref_at = int(start_xref.group(1))
    windows = [(tail_at, tail)]
    if xref_at < tail_at:  # a cross-reference stream's dictionary, or a long table before the trailer
        plate.seek(xref_at)
        windows.append((xref_at, plate.read(TRAILER_WINDOW_BYTES)))
    found = [(at + match.start(), at, match) for at, window in windows for match in _ID_ENTRY.finditer(window)
             if at + match.start() >= xref_at]
    if not found:
        return None
    _, at, match = max(found, key=lambda item: item[0])
    if match.group(1) == STATIC_ID_HEX:
        return at + match.start(1), at + match.start(2)
    return (at + match.start(2),)
