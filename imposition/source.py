"""Opening a source PDF with typed errors, and reading each page's boxes.

Runs inside the engine's child process (:mod:`imposition.child`): hostile input is parsed only there.
"""

from __future__ import annotations

import math
from pathlib import Path

import pikepdf

from .errors import DamagedPdf, NoPages, NotAPdf, PasswordRequired, TooManyPages, clipped, without_paths
from .geometry import PageBoxes, Rect, normalise_rotate

#: A PDF header may start anywhere in the first 1024 bytes (PDF 32000-1 §7.5.2 and Annex H.3 note 13).
PDF_HEADER_WINDOW_BYTES = 1024
#: Default MediaBox of a page that has none: US Letter, as qpdf and pdf.js assume.
DEFAULT_MEDIA_BOX = (0.0, 0.0, 612.0, 792.0)
#: The page tree is walked at most this deep when looking up an inherited attribute (guards a cycle).
MAX_PAGE_TREE_DEPTH = 64
#: Longest part of a qpdf message quoted in an error (characters): qpdf repeats what it could not
#: parse, which may be a 400-digit number.
QPDF_MESSAGE_LIMIT_CHARS = 300


def qpdf_message(exc: BaseException | str, path: Path) -> str:
    """What qpdf said about ``path``, for an error message: the file named by its bare name, cut to
    ``QPDF_MESSAGE_LIMIT_CHARS``."""
    return clipped(without_paths(str(exc), [path]), QPDF_MESSAGE_LIMIT_CHARS)


#: Words of qpdf's warnings (QPDF_pages.cc) that say it left a page out of the page tree it built:
#: an object it could not parse (a number too long for it, a structure nested too deep) is null, and
#: a null kid is dropped. The document then has fewer pages than its author made: damaged.
DROPPED_PAGE_SIGNS = ("Pages tree includes non-dictionary object", "invalid kid at index", "ignoring page")


def _page_tree_damage(pdf: pikepdf.Pdf, page_count: int, path: Path) -> str | None:
    """Why the page tree qpdf read from ``pdf`` is not the one its author wrote, or None.

    Damaged: qpdf warned that it dropped a page (:data:`DROPPED_PAGE_SIGNS`), or found no page and
    warned of anything, or the root's /Count is not the number of pages (qpdf itself refuses to
    change such a tree: "/Count is wrong after flattening pages tree").
    """
    warnings = pdf.get_warnings()
    dropped = [warning for warning in warnings if any(sign in warning for sign in DROPPED_PAGE_SIGNS)]
    if dropped or (page_count == 0 and warnings):
        if not dropped:
            return f"qpdf found no page it could read: {qpdf_message(warnings[0], path)}"
        at = warnings.index(dropped[0])  # qpdf warns of the object it could not parse just before
        cause = f"; the warning before it: {qpdf_message(warnings[at - 1], path)}" if at else ""
        return f"qpdf left a page out ({qpdf_message(dropped[0], path)}){cause}"
    count = pdf.Root.Pages.get("/Count")
    if isinstance(count, int) and not isinstance(count, bool) and count != page_count:
        return f"its root's /Count is {count} but it holds {page_count} pages"
    return None


def open_source(path: Path, *, max_pages: int) -> pikepdf.Pdf:
    """Open ``path`` for imposition.

    qpdf reconstructs a damaged cross-reference table on its own before giving up. A PDF with only an
    owner password (permissions, no user password) opens with the empty password.

    Returns:
        The open document (the caller closes it).

    Raises:
        NotAPdf: no ``%PDF-`` header in the first 1024 bytes.
        PasswordRequired: a user password is needed.
        DamagedPdf: qpdf cannot open or reconstruct the file, or left pages out of its page tree (it
            could not parse them), or the tree's /Count is wrong.
        NoPages: the page tree is empty.
        TooManyPages: more than ``max_pages`` pages.
    """
    with path.open("rb") as handle:
        head = handle.read(PDF_HEADER_WINDOW_BYTES)
    if b"%PDF-" not in head:
        raise NotAPdf(f"{path.name}: not a PDF (no %PDF- header in its first {PDF_HEADER_WINDOW_BYTES} bytes)")
    try:
        pdf = pikepdf.open(path)
    except pikepdf.PasswordError:
        raise PasswordRequired(f"{path.name}: encrypted with a user password; a password is needed to open it") from None
    except pikepdf.PdfError as exc:
        raise DamagedPdf(
            f"{path.name}: damaged beyond repair (qpdf could not reconstruct it: {qpdf_message(exc, path)})"
        ) from None
    try:
        page_count = len(pdf.pages)
        damage = _page_tree_damage(pdf, page_count, path)
    except (pikepdf.PdfError, pikepdf.QpdfRuntimeError) as exc:
        pdf.close()
        raise DamagedPdf(f"{path.name}: damaged page tree ({qpdf_message(exc, path)})") from None
    if damage is not None:
        pdf.close()
        raise DamagedPdf(f"{path.name}: damaged page tree: {damage}")
    if page_count == 0:
        pdf.close()
        raise NoPages(f"{path.name}: the PDF has no pages")
    if page_count > max_pages:
        pdf.close()
        raise TooManyPages(f"{path.name}: {page_count} pages is more than max_pages={max_pages}")
    return pdf


def inherited(page: pikepdf.Dictionary, key: str) -> pikepdf.Object | None:
    """A page attribute, looked up through the page tree when the page lacks it.

    /Resources, /MediaBox, /CropBox and /Rotate are inheritable (PDF 32000-1 §7.7.3.4, Table 30).
    """
    node: pikepdf.Object | None = page
    for _ in range(MAX_PAGE_TREE_DEPTH):
        if node is None or not isinstance(node, pikepdf.Dictionary):
            return None
        if key in node:
            return node[key]
        node = node.get("/Parent")
    return None


def _entry(page: pikepdf.Dictionary, key: str) -> pikepdf.Object | None:
    """``page[key]``, or None when absent (a membership test first: pikepdf's ``get`` of an absent
    key costs several times more)."""
    return page[key] if key in page else None


def _box(value: pikepdf.Object | None, page_number: int, name: str) -> Rect | None:
    if value is None:
        return None
    try:
        numbers = [float(v) for v in value]
    except (TypeError, ValueError):
        raise DamagedPdf(f"page {page_number}: {name} is not an array of numbers") from None
    if len(numbers) != 4:
        raise DamagedPdf(f"page {page_number}: {name} has {len(numbers)} numbers, not 4")
    if not all(math.isfinite(number) for number in numbers):
        raise DamagedPdf(f"page {page_number}: {name} holds a number too large for a length")
    return Rect.from_box(numbers)


#: Page entries that decide a page's boxes: the three inheritable ones first (PDF 32000-1 Table 30).
_INHERITED_ENTRIES = ("/MediaBox", "/CropBox", "/Rotate")
_OWN_ENTRIES = ("/TrimBox", "/BleedBox", "/UserUnit")


def _entries(page: pikepdf.Dictionary, from_tree: dict[tuple[int, int], tuple]) -> tuple:
    """The page's /MediaBox, /CropBox, /Rotate (inherited when absent), /TrimBox, /BleedBox and
    /UserUnit, each None when absent. What a page inherits is looked up once per parent node."""
    inheritable = [_entry(page, key) for key in _INHERITED_ENTRIES]
    if None in inheritable:
        parent = _entry(page, "/Parent")
        if isinstance(parent, pikepdf.Dictionary) and parent.is_indirect:
            tree = from_tree.get(parent.objgen)
            if tree is None:
                tree = from_tree[parent.objgen] = tuple(inherited(parent, key) for key in _INHERITED_ENTRIES)
        else:
            tree = tuple(inherited(parent, key) for key in _INHERITED_ENTRIES)
        inheritable = [own if own is not None else up for own, up in zip(inheritable, tree)]
    return (*inheritable, *(_entry(page, key) for key in _OWN_ENTRIES))


def _page_boxes(entries: tuple, page_number: int) -> PageBoxes:
    media_box, crop_box, rotate_value, trim_box, bleed_box, user_unit_value = entries
    media = _box(media_box, page_number, "MediaBox") or Rect.from_box(DEFAULT_MEDIA_BOX)
    crop = (_box(crop_box, page_number, "CropBox") or media).intersect(media)
    trim = (_box(trim_box, page_number, "TrimBox") or crop).intersect(crop)
    bleed = (_box(bleed_box, page_number, "BleedBox") or crop).intersect(crop)
    if trim.width <= 0 or trim.height <= 0:
        raise DamagedPdf(f"page {page_number}: its visible trim area is empty (TrimBox ∩ CropBox ∩ MediaBox)")
    try:
        rotate = normalise_rotate(float(rotate_value or 0))
        user_unit = float(user_unit_value if user_unit_value is not None else 1.0)
    except (TypeError, ValueError, OverflowError):
        raise DamagedPdf(f"page {page_number}: /Rotate or /UserUnit is not a number a page can have") from None
    if not user_unit > 0:
        raise DamagedPdf(f"page {page_number}: /UserUnit={user_unit:g} must be positive")
    if not all(0 < length * user_unit < math.inf for length in (trim.width, trim.height)):
        raise DamagedPdf(
            f"page {page_number}: its trim ({trim.width:g} × {trim.height:g}) times /UserUnit={user_unit:g} "
            f"is not a positive finite size"
        )
    return PageBoxes(crop=crop, trim=trim, bleed=bleed, rotate_degrees_cw=rotate, user_unit=user_unit)


def page_boxes(pdf: pikepdf.Pdf) -> list[PageBoxes]:
    """The boxes of every page of ``pdf``, in page order, per PDF 32000-1 §14.11.2.

    Pages whose box entries are written the same (most documents) share one :class:`PageBoxes`,
    worked out once: per page only the entries are read and compared as written (pikepdf hands
    numbers over as Python numbers; anything else is compared by its PDF syntax).

    Raises:
        DamagedPdf: a box is malformed, or the visible trim has no area (the message names the
            1-based page number).
    """
    known: dict[tuple, PageBoxes] = {}
    from_tree: dict[tuple[int, int], tuple] = {}
    boxes = []
    for number, page in enumerate(pdf.pages, start=1):
        entries = _entries(page.obj, from_tree)
        key = tuple(entry.unparse(resolved=True) if isinstance(entry, pikepdf.Object) else entry for entry in entries)
        found = known.get(key)
        if found is None:
            found = known[key] = _page_boxes(entries, number)
        boxes.append(found)
    return boxes
