"""Opening a source PDF with typed errors, and reading each page's boxes.

Runs inside the engine's child process (:mod:`imposition.engine.child`): hostile input is parsed only there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence, Set
from pathlib import Path
from typing import NamedTuple

import pikepdf

from .errors import (
    DamagedPdf, MemoryLimitExceeded, NoPages, NotAPdf, PasswordRequired, PlateWarning, TooManyPages, TrimBoxClipped,
    TrimBoxReplaced, clipped, page_ranges, without_paths,
)
from .geometry import PageBoxes, Rect, displayed_size, normalise_rotate
from .sheets import pt_to_mm

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


def _page_tree_damage(pdf: pikepdf.Pdf, page_count: int, path: Path, warnings: list[str]) -> str | None:
    """Why the page tree qpdf read from ``pdf`` is not the one its author wrote, or None.

    Damaged: qpdf warned that it dropped a page (:data:`DROPPED_PAGE_SIGNS`), or found no page and
    warned of anything, or the root's /Count is not the number of pages (qpdf itself refuses to
    change such a tree: "/Count is wrong after flattening pages tree").
    """
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


def open_source(path: Path, *, max_pages: int, warnings_out: list[str] | None = None) -> pikepdf.Pdf:
    """Open ``path`` for imposition.

    ``warnings_out``, when given, receives qpdf's warnings about the file (qpdf hands each warning over
    once): :func:`content_damage` needs them to tell a repaired file from a damaged one.

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
        warnings = pdf.get_warnings()
        if warnings_out is not None:
            warnings_out.extend(warnings)
        damage = _page_tree_damage(pdf, page_count, path, warnings)
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


def inherited(page: pikepdf.Object | None, key: str) -> pikepdf.Object | None:
    """A page attribute, looked up through the page tree when the page lacks it (None when
    ``page`` is no dictionary).

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


class SourcePage(NamedTuple):
    """One page as the checks read it (the content budget, the damage check, the boxes), read once:
    its dictionary, the keys it holds (null entries left out, as pikepdf's ``in`` leaves them out) and
    its /Resources (inherited when absent). Valid until the page is changed (drawing changes it)."""

    obj: pikepdf.Dictionary
    keys: set[str]
    resources: pikepdf.Object | None

    def get(self, key: str) -> pikepdf.Object | None:
        """The page's entry ``key``, or None when absent (an absent key costs no call into pikepdf)."""
        return self.obj.get(key) if key in self.keys else None


def read_pages(pdf: pikepdf.Pdf) -> list[SourcePage]:
    """Every page of ``pdf`` in order (the page tree walked once, for every check)."""
    pages = []
    for page in pdf.pages:
        obj = page.obj
        keys = obj.keys()
        pages.append(SourcePage(obj, keys, obj.get("/Resources") if "/Resources" in keys else inherited(obj, "/Resources")))
    return pages


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


def _entries(page: SourcePage, from_tree: dict[tuple[int, int], tuple]) -> tuple:
    """The page's /MediaBox, /CropBox, /Rotate (inherited when absent), /TrimBox, /BleedBox and
    /UserUnit, each None when absent. What a page inherits is looked up once per parent node."""
    inheritable = [page.get(key) for key in _INHERITED_ENTRIES]
    if None in inheritable:
        parent = page.get("/Parent")
        if isinstance(parent, pikepdf.Dictionary) and parent.is_indirect:
            tree = from_tree.get(parent.objgen)
            if tree is None:
                tree = from_tree[parent.objgen] = tuple(inherited(parent, key) for key in _INHERITED_ENTRIES)
        else:
            tree = tuple(inherited(parent, key) for key in _INHERITED_ENTRIES)
        inheritable = [own if own is not None else up for own, up in zip(inheritable, tree)]
    return (*inheritable, *(page.get(key) for key in _OWN_ENTRIES))


#: The smallest side (points) a TrimBox keeps inside the visible area before it counts as outside it.
MIN_VISIBLE_TRIM_PT = 1e-3
#: A TrimBox reaching further than this (points, about 0.2 mm) beyond the visible area on an edge
#: counts as clipped by it (``trim_box_clipped``); less is rounding in the file's numbers.
CLIPPED_TRIM_TOLERANCE_PT = 0.5


def _page_boxes(entries: tuple, page_number: int) -> tuple[PageBoxes, str | None, str | None]:
    """The page's boxes; the box its trim fell back to (``CropBox`` or ``MediaBox``) when its TrimBox
    lies outside the visible area (CropBox ∩ MediaBox), or None; and the box that clipped its TrimBox
    when that lies partly outside the visible area or encloses it, or None."""
    media_box, crop_box, rotate_value, trim_box, bleed_box, user_unit_value = entries
    media = _box(media_box, page_number, "MediaBox") or Rect.from_box(DEFAULT_MEDIA_BOX)
    crop = (_box(crop_box, page_number, "CropBox") or media).intersect(media)
    given_trim = _box(trim_box, page_number, "TrimBox")
    trim = (given_trim or crop).intersect(crop)
    fallback = None
    if given_trim is not None and min(trim.width, trim.height) < MIN_VISIBLE_TRIM_PT <= min(crop.width, crop.height):
        # Outside the page: preflight tools fall back to the CropBox, or the MediaBox without one
        # (PDF 32000-1 §14.11.2: the TrimBox defaults to the CropBox, which defaults to the MediaBox).
        trim, fallback = crop, ("CropBox" if crop_box is not None else "MediaBox")
    clipped_by = None
    if given_trim is not None and fallback is None and max(
            trim.x0 - given_trim.x0, trim.y0 - given_trim.y0, given_trim.x1 - trim.x1,
            given_trim.y1 - trim.y1) > CLIPPED_TRIM_TOLERANCE_PT:
        clipped_by = "CropBox" if crop_box is not None and crop != media else "MediaBox"
    bleed = (_box(bleed_box, page_number, "BleedBox") or crop).intersect(crop)
    if fallback is not None and not (bleed.x0 <= trim.x0 and bleed.y0 <= trim.y0
                                     and trim.x1 <= bleed.x1 and trim.y1 <= bleed.y1):
        bleed = trim  # a BleedBox around the TrimBox that lay outside: no bleed is known
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
    return (PageBoxes(crop=crop, trim=trim, bleed=bleed, rotate_degrees_cw=rotate, user_unit=user_unit), fallback,
            clipped_by)


def page_boxes(pdf: pikepdf.Pdf, pages: Sequence[SourcePage] | None = None, *,
               fallbacks_out: dict[int, str] | None = None,
               clipped_out: dict[int, str] | None = None) -> list[PageBoxes]:
    """The boxes of every page of ``pdf`` (``pages``: its pages read already, :func:`read_pages`), in
    page order, per PDF 32000-1 §14.11.2.

    Pages whose box entries are written the same (most documents) share one :class:`PageBoxes`,
    worked out once: per page only the entries are read and compared as written (pikepdf hands
    numbers over as Python numbers; anything else is compared by its PDF syntax).

    A TrimBox outside the page's visible area (CropBox ∩ MediaBox) falls back to the CropBox, or the
    MediaBox when the page has no CropBox, as preflight tools do; ``fallbacks_out``, when given,
    receives each such page (1-based) with the box used (:func:`trim_fallback_warning` words it). A
    TrimBox partly outside the visible area, or enclosing it, is clipped to it; ``clipped_out``, when
    given, receives each such page with the box that clipped it (:func:`trim_clipped_warning`).

    Raises:
        DamagedPdf: a box is malformed, or the visible area has none (the message names the
            1-based page number).
    """
    known: dict[tuple, tuple[PageBoxes, str | None, str | None]] = {}
    from_tree: dict[tuple[int, int], tuple] = {}
    boxes = []
    for number, page in enumerate(read_pages(pdf) if pages is None else pages, start=1):
        entries = _entries(page, from_tree)
        key = tuple(entry.unparse(resolved=True) if isinstance(entry, pikepdf.Object) else entry for entry in entries)
        found = known.get(key)
        if found is None:
            found = known[key] = _page_boxes(entries, number)
        boxes.append(found[0])
        if found[1] is not None and fallbacks_out is not None:
            fallbacks_out[number] = found[1]
        if found[2] is not None and clipped_out is not None:
            clipped_out[number] = found[2]
    return boxes


def _pages_by_box(found: dict[int, str], article: str) -> str:
    """``the CropBox for page 2; the MediaBox for pages 4–6``: each box of ``found`` (1-based page →
    box name) with its pages, after ``article``."""
    by_box: dict[str, list[int]] = {}
    for number, box in sorted(found.items()):
        by_box.setdefault(box, []).append(number)
    return "; ".join(f"{article} {box} for {'page' if len(numbers) == 1 else 'pages'} {page_ranges(numbers)}"
                     for box, numbers in by_box.items())


def _pages_counted(found: dict[int, str]) -> str:
    """``2 pages (pages 2–3)``: how many pages ``found`` holds, and which."""
    return f"{len(found)} {'page' if len(found) == 1 else 'pages'} (pages {page_ranges(found)})"


def trim_fallback_warning(name: str, fallbacks: dict[int, str]) -> PlateWarning | None:
    """The ``trim_box_replaced`` warning for the pages of file ``name`` whose TrimBox fell back
    (:func:`page_boxes`), naming every page; None when none did."""
    if not fallbacks:
        return None
    return PlateWarning(TrimBoxReplaced.code,
                        f"{name}: the TrimBox of {_pages_counted(fallbacks)} lies outside the page's MediaBox or "
                        f"CropBox; imposed on {_pages_by_box(fallbacks, 'the')} instead, as preflight does: check the "
                        f"trim size")


def trim_clipped_warning(name: str, clipped_pages: dict[int, str], boxes: Sequence[PageBoxes]) -> PlateWarning | None:
    """The ``trim_box_clipped`` warning for the pages of file ``name`` whose TrimBox was clipped to
    their visible area (:func:`page_boxes`), naming every page and the trims they have; None when none
    was."""
    if not clipped_pages:
        return None
    sizes = sorted({tuple(round(pt_to_mm(v), 1) for v in displayed_size(boxes[n - 1])) for n in clipped_pages})
    shown_sizes = ", ".join(f"{w:.1f} × {h:.1f} mm" for w, h in sizes[:3]) + (", …" if len(sizes) > 3 else "")
    return PlateWarning(TrimBoxClipped.code,
                        f"{name}: the TrimBox of {_pages_counted(clipped_pages)} reaches outside the page or "
                        f"encloses it; clipped to {_pages_by_box(clipped_pages, 'its')}: imposed on the part inside "
                        f"({shown_sizes}), not the trim the TrimBox states: check the trim size")


#: How qpdf names the object a warning is about: ``(object 15 0, offset 2473)``.
_WARNED_OBJECT = re.compile(r"\(object (\d+) (\d+)")
#: Resource categories whose entries a page's content names (PDF 32000-1 Table 33).
RESOURCE_CATEGORIES = ("/Font", "/XObject", "/ExtGState", "/ColorSpace", "/Pattern", "/Shading", "/Properties")
#: At most this many different problems (each with its pages) are described in a ``damaged`` message.
MAX_DAMAGED_PAGES_SHOWN = 10


def _named_objects(warnings: list[str]) -> dict[tuple[int, int], str]:
    """The objects qpdf's ``warnings`` are about, each with the first warning naming it."""
    named: dict[tuple[int, int], str] = {}
    for warning in warnings:
        for number, generation in _WARNED_OBJECT.findall(warning):
            named.setdefault((int(number), int(generation)), warning)
    return named


def _missing(mapping: pikepdf.Dictionary, keys: set[str] | None = None) -> list[str]:
    """Keys of ``mapping`` whose value is null: a reference to an object the file does not hold (qpdf
    resolves a dangling reference to null and then hides the key from ``in`` and ``keys()``);
    ``keys``: ``mapping.keys()`` when read already."""
    if len(mapping) == len(mapping.keys() if keys is None else keys):  # ``len`` counts null entries: cheap
        return []
    return sorted(key for key, value in mapping.as_dict().items() if value is None)


def _content_problem(page: SourcePage, warned: dict[tuple[int, int], str], pdf: pikepdf.Pdf,
                     path: Path, repairs: list[str], read_whole: Set[tuple[int, int]]) -> str | None:
    """Why the content of ``page`` cannot be read whole, or None. Each content stream is decoded,
    but for those in ``read_whole`` (read whole by the content budget already); warnings qpdf gives
    before that (it repairs lazily, as objects are first read) go to ``repairs``."""
    if "/Contents" not in page.keys:
        return "its content stream (/Contents) is missing" if "/Contents" in _missing(page.obj, page.keys) else None
    contents = page.obj.get("/Contents")
    parts = list(contents) if isinstance(contents, pikepdf.Array) else [contents]
    for index, part in enumerate(parts):
        if not isinstance(part, pikepdf.Stream):
            return f"part {index} of its /Contents is missing" if part is None else None  # typed in drawing
        if part.is_indirect and part.objgen in warned:
            return f"its content stream (object {part.objgen[0]} {part.objgen[1]}) is damaged: " + \
                qpdf_message(warned[part.objgen], path)
        if part.is_indirect and part.objgen in read_whole:
            continue  # what qpdf warned of before goes to ``repairs`` with the next call below
        repairs.extend(pdf.get_warnings())  # what qpdf found lazily before (a reconstruction): not this stream's
        try:
            part.read_bytes()
        except (pikepdf.PdfError, pikepdf.QpdfRuntimeError) as exc:
            if "bad_alloc" in str(exc):  # qpdf reports an allocation beyond RLIMIT_AS as a read error
                raise MemoryLimitExceeded(
                    f"the engine ran out of its memory budget (engine_memory_limit_bytes) decoding a content "
                    f"stream: {qpdf_message(exc, path)}"
                ) from None
            return f"its content stream cannot be decoded: {qpdf_message(exc, path)}"
        decoding = pdf.get_warnings()  # qpdf warns, rather than fails, of a stream it decodes only in part
        if decoding:
            return f"its content stream cannot be decoded whole: {qpdf_message(decoding[0], path)}"
    return None


def _resources_problem(resources: pikepdf.Object | None, warned: dict[tuple[int, int], str], path: Path) -> str | None:
    """Why the resources a page's content names cannot be read whole, or None (images are not
    decoded: a damaged one is one qpdf warned about)."""
    if not isinstance(resources, pikepdf.Dictionary):
        return None  # absent (nothing to name) or the wrong type (typed in drawing)
    keys = resources.keys()
    missing = _missing(resources, keys)
    if missing:
        return f"its resource categories {', '.join(missing)} are missing"
    for category in RESOURCE_CATEGORIES:
        entries = resources.get(category) if category in keys else None
        if not isinstance(entries, pikepdf.Dictionary):
            continue
        missing = _missing(entries)
        if missing:
            return f"its resources {', '.join(missing)} ({category}) are missing"
        if not warned:  # qpdf warned of no object: none of them can be one it repaired
            continue
        for name, value in entries.items():
            if isinstance(value, pikepdf.Object) and value.is_indirect and value.objgen in warned:
                return f"its resource {name} ({category}, object {value.objgen[0]} {value.objgen[1]}) is damaged: " + \
                    qpdf_message(warned[value.objgen], path)
    return None


def content_damage(pdf: pikepdf.Pdf, path: Path, open_warnings: list[str],
                   pages: Sequence[SourcePage] | None = None,
                   read_whole: Set[tuple[int, int]] = frozenset()) -> str | None:
    """Whether every page's content and resources read whole; raises when one does not.

    A file cut short keeps its page tree (qpdf rebuilds the cross-reference table) but loses the
    objects after the cut: a page whose content stream is missing, cannot be decoded, or is one qpdf
    warned about, or whose named resources are missing or damaged, cannot be imposed truthfully.

    Args:
        pdf: the open source (:func:`open_source`).
        path: its file (named by its bare name in messages).
        open_warnings: what qpdf warned of while opening it (``open_source(warnings_out=...)``).
        pages: its pages, read already (:func:`read_pages`).
        read_whole: content streams the content budget read whole
            (:attr:`imposition.engine.budget.ContentUse.read_whole`): qpdf would decode them without error or
            warning, so they are not decoded again.

    Returns:
        None for a file that needed no repair; otherwise what qpdf repaired (the first warning and
        how many there were), for a ``repaired`` warning.

    Raises:
        DamagedPdf: ``damaged``, naming every page that cannot be read (1-based) and why.
    """
    warned = _named_objects(open_warnings)
    repairs = [*open_warnings, *pdf.get_warnings()]
    damaged: dict[int, str] = {}
    checked: dict[tuple[int, int], str | None] = {}
    for number, page in enumerate(read_pages(pdf) if pages is None else pages, start=1):
        problem = _content_problem(page, warned, pdf, path, repairs, read_whole)
        if problem is None:
            resources = page.resources
            key = resources.objgen if isinstance(resources, pikepdf.Object) and resources.is_indirect else None
            if key is None or key not in checked:
                problem = _resources_problem(resources, warned, path)
                if key is not None:
                    checked[key] = problem
            else:
                problem = checked[key]
            if problem is None and "/Resources" in _missing(page.obj, page.keys):
                problem = "its /Resources is missing"
        if problem is not None:
            damaged[number] = problem
    if damaged:
        by_problem: dict[str, list[int]] = {}
        for number, problem in damaged.items():
            by_problem.setdefault(problem, []).append(number)
        shown_problems = list(by_problem.items())[:MAX_DAMAGED_PAGES_SHOWN]
        more = len(by_problem) - len(shown_problems)
        raise DamagedPdf(
            f"{path.name}: {len(damaged)} of {len(pdf.pages)} pages cannot be read "
            f"(pages {page_ranges(damaged)}): "
            + "; ".join(f"{'page' if len(numbers) == 1 else 'pages'} {page_ranges(numbers)}: {problem}"
                        for problem, numbers in shown_problems)
            + (f"; and {more} more problems" if more > 0 else "")
        )
    repairs.extend(pdf.get_warnings())
    if not repairs:
        return None
    return (f"{path.name} was damaged and qpdf repaired it ({len(repairs)} warnings, the first: "
            f"{qpdf_message(repairs[0], path)}); every page's content and resources read whole")

