"""A CIP4 JDF 1.3 imposition ticket of a plan: the Layout a shop's workflow system can take over.

Written from the :class:`~imposition.engine.planning.ImpositionPlan`, never from the plate. Source:
CIP4 JDF Specification 1.3, chapter 7 "Resources", §7.2 Process Resources: *Layout* (partitioned by
``SignatureName``, ``SheetName`` and ``Side``: the Signature, Sheet and Surface elements of JDF 1.2
became these partitions in 1.3), its *PlacedObject* subelements *ContentObject* and *MarkObject*,
*RunList*, *Media*, *FoldingParams* (``FoldCatalog``) and *ConventionalPrintingParams* (``WorkStyle``).

Coordinates are PDF points, origin at the sheet's lower-left (the plate page's own space; the
Surface's ``SurfaceContentsBox`` is the whole sheet). Per placed page, a ContentObject:

* ``Ord``: the 0-based page of the input RunList (the document in its own order).
* ``CTM``: the page's default user space (PDF 32000-1 §8.3.2.3, UserUnit and /Rotate folded in)
  → the surface: the matrix the plate draws the page's content with.
* ``TrimCTM`` and ``TrimSize``: the trimmed page as it reads (origin at its TrimBox's lower-left,
  ``TrimSize`` its unscaled width and height) → the surface; ``TrimCTM`` maps
  ``0 0 TrimSize`` onto the page's trim on the sheet. ``ClipBox``: trim plus the bleed kept.

A blank padding page has no ContentObject (JDF has no Ord for a blank: a negative Ord counts from
the RunList's end). Marks are MarkObjects (``CTM`` identity: drawn in sheet space) with
``ClipBox`` and their JDF subelements: ``CutMark`` (crop marks: only at cuts, never on a fold, as the
plate draws them), ``RegisterMark``, ``ColorControlStrip``; fold and collation marks, which JDF 1.3
has no subelement for, say so in ``imp:MarkKind`` (namespace :data:`EXTENSION_NAMESPACE`), as every
MarkObject does, and each fold mark is an ``imp:FoldMark`` (``MarkType`` ``VerticalFold`` or
``HorizontalFold``, ``Position`` its end nearer the block, as a CutMark's).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from pikepdf import Matrix

from .geometry import PageBoxes, Rect, display_matrix, displayed_size
from .job import Layout
from .marks import MARK_LINE_WIDTH_PT, Mark, Patch, Target
from .planning import ImpositionPlan, Placement, Plate

#: The JDF schema namespace, the same for every JDF 1.x version (the version is ``JDF/@Version``).
JDF_NAMESPACE = "http://www.CIP4.org/JDFSchema_1_1"
#: The JDF version written: the first with partitioned Layouts, TrimCTM and TrimSize.
JDF_VERSION = "1.3"
#: Our own attributes (``imp:MarkKind``), in a namespace of ours as JDF extensions must be.
EXTENSION_NAMESPACE = "urn:imposition:jdf:1"
#: ``JDF/ResourcePool/ConventionalPrintingParams/@WorkStyle`` for each ``duplex`` of a layout.
WORK_STYLES = {"simplex": "Simplex", "sheetwise": "WorkAndBack", "work_and_turn": "WorkAndTurn",
               "work_and_tumble": "WorkAndTumble"}
#: Decimal places of lengths and matrix terms written (1e-4 pt is far below any press's register).
DECIMALS = 4

ET.register_namespace("", JDF_NAMESPACE)
ET.register_namespace("imp", EXTENSION_NAMESPACE)


def _tag(name: str) -> str:
    return f"{{{JDF_NAMESPACE}}}{name}"


def _numbers(*values: float) -> str:
    """Values as JDF writes numbers: space-separated, at most :data:`DECIMALS` places, no ``-0``."""
    shown = []
    for value in values:
        text = f"{round(value, DECIMALS) + 0.0:.{DECIMALS}f}".rstrip("0").rstrip(".")
        shown.append("0" if text in ("-0", "") else text)
    return " ".join(shown)


def _rect(rect: Rect) -> str:
    return _numbers(rect.x0, rect.y0, rect.x1, rect.y1)


def _content_object(parent: ET.Element, placement: Placement, boxes: PageBoxes) -> None:
    matrix = Matrix(*placement.matrix)
    trim_ctm = display_matrix(boxes).inverse() @ matrix
    ET.SubElement(parent, _tag("ContentObject"), {
        "Ord": str(placement.page), "CTM": _numbers(*matrix.shorthand),
        "TrimCTM": _numbers(*trim_ctm.shorthand), "TrimSize": _numbers(*displayed_size(boxes)),
        "ClipBox": _rect(placement.clip),
    })


def _mark_object(parent: ET.Element, kind: str, bounds: Sequence[Rect]) -> ET.Element:
    box = Rect(min(r.x0 for r in bounds), min(r.y0 for r in bounds), max(r.x1 for r in bounds),
               max(r.y1 for r in bounds))
    return ET.SubElement(parent, _tag("MarkObject"), {
        "CTM": "1 0 0 1 0 0", "ClipBox": _rect(box), f"{{{EXTENSION_NAMESPACE}}}MarkKind": kind,
    })


def _line_bounds(mark: Mark) -> Rect:
    half = MARK_LINE_WIDTH_PT / 2
    return Rect(min(mark.x0, mark.x1) - half, min(mark.y0, mark.y1) - half, max(mark.x0, mark.x1) + half,
                max(mark.y0, mark.y1) + half)


def _cut_mark(parent: ET.Element, mark: Mark, centre: tuple[float, float]) -> None:
    """A crop mark as a JDF CutMark: the block's edge it stands at (seen from the block's ``centre``)
    and its end nearer the block."""
    if mark.x0 == mark.x1:  # vertical: marks a vertical cut at the head or the foot
        top = min(mark.y0, mark.y1) >= centre[1]
        kind, position = ("TopVerticalCutMark", (mark.x0, min(mark.y0, mark.y1))) if top else \
            ("BottomVerticalCutMark", (mark.x0, max(mark.y0, mark.y1)))
    else:
        right = min(mark.x0, mark.x1) >= centre[0]
        kind, position = ("RightHorizontalCutMark", (min(mark.x0, mark.x1), mark.y0)) if right else \
            ("LeftHorizontalCutMark", (max(mark.x0, mark.x1), mark.y0))
    ET.SubElement(parent, _tag("CutMark"), {"MarkType": kind, "Position": _numbers(*position)})


def _fold_mark(parent: ET.Element, mark: Mark, centre: tuple[float, float]) -> None:
    """A fold mark as the extension element ``imp:FoldMark``: the fold line's direction and the mark's
    end nearer the block (seen from the block's ``centre``), as :func:`_cut_mark` gives a CutMark's."""
    if mark.x0 == mark.x1:
        above = min(mark.y0, mark.y1) >= centre[1]
        kind, position = "VerticalFold", (mark.x0, min(mark.y0, mark.y1) if above else max(mark.y0, mark.y1))
    else:
        right = min(mark.x0, mark.x1) >= centre[0]
        kind, position = "HorizontalFold", (min(mark.x0, mark.x1) if right else max(mark.x0, mark.x1), mark.y0)
    ET.SubElement(parent, f"{{{EXTENSION_NAMESPACE}}}FoldMark", {"MarkType": kind, "Position": _numbers(*position)})


def _block_centre(plate: Plate, plan: ImpositionPlan) -> tuple[float, float]:
    """The centre of the plate's block of trims (the sheet's when it holds no page)."""
    trims = [p.trim for p in plate.placements]
    if not trims:
        return plan.width_pt / 2, plan.height_pt / 2
    return ((min(t.x0 for t in trims) + max(t.x1 for t in trims)) / 2,
            (min(t.y0 for t in trims) + max(t.y1 for t in trims)) / 2)


def _marks(surface: ET.Element, plate: Plate, centre: tuple[float, float]) -> None:
    """The plate's marks, one MarkObject per kind (crop, fold, registration, colour bar, collation)."""
    for kind in ("crop", "fold"):
        lines = [m for m in plate.marks if m.kind == kind]
        if lines:
            mark_object = _mark_object(surface, kind, [_line_bounds(m) for m in lines])
            for mark in lines:
                (_cut_mark if kind == "crop" else _fold_mark)(mark_object, mark, centre)
    if plate.targets:
        mark_object = _mark_object(surface, "registration", [t.bounds for t in plate.targets])
        for target in plate.targets:
            _register_mark(mark_object, target)
    bar = [p for p in plate.patches if p.kind == "colour_bar"]
    if bar:
        mark_object = _mark_object(surface, "colour_bar", [p.rect for p in bar])
        _colour_strip(mark_object, bar)
    collation = [p for p in plate.patches if p.kind == "collation"]
    if collation:
        _mark_object(surface, "collation", [p.rect for p in collation])


def _register_mark(parent: ET.Element, target: Target) -> None:
    ET.SubElement(parent, _tag("RegisterMark"), {"Center": _numbers(target.x, target.y), "MarkType": "Circle Cross"})


def _colour_strip(parent: ET.Element, patches: Sequence[Patch]) -> None:
    x0, y0 = min(p.rect.x0 for p in patches), min(p.rect.y0 for p in patches)
    x1, y1 = max(p.rect.x1 for p in patches), max(p.rect.y1 for p in patches)
    ET.SubElement(parent, _tag("ColorControlStrip"), {"Center": _numbers((x0 + x1) / 2, (y0 + y1) / 2),
                                                     "Size": _numbers(x1 - x0, y1 - y0)})


def _resource(pool: ET.Element, name: str, resource_id: str, resource_class: str, **attributes: str) -> ET.Element:
    return ET.SubElement(pool, _tag(name), {"ID": resource_id, "Class": resource_class, "Status": "Available",
                                            **attributes})


def _run_list(pool: ET.Element, resource_id: str, url: str, pages: int) -> None:
    run_list = _resource(pool, "RunList", resource_id, "Parameter", NPage=str(pages))
    element = ET.SubElement(run_list, _tag("LayoutElement"))
    ET.SubElement(element, _tag("FileSpec"), {"URL": url, "MimeType": "application/pdf"})


def layout_jdf(plan: ImpositionPlan, layout: Layout, boxes: Sequence[PageBoxes], *, job_id: str,
               source_name: str, plate_name: str) -> bytes:
    """The JDF 1.3 ``Imposition`` node of ``plan`` as UTF-8 XML.

    Args:
        plan: the plan the plate was drawn from.
        layout: the layout it was planned for (kind, duplex, fold scheme).
        boxes: the boxes of every source page, in document order (the plan's ``pages_in``).
        job_id: ``JDF/@JobID``.
        source_name, plate_name: file names of the input document and the plate (FileSpec URLs,
            relative: the ticket travels beside them).

    Returns:
        The document: one Signature partition per signature (booklets: per folded section; grids:
        one), one Sheet per press sheet, one Surface per plate (``Back`` for a sheetwise back;
        work and turn or tumble: one ``Front`` surface holds both sides, as the plate does).
    """
    root = ET.Element(_tag("JDF"), {"ID": "imposition", "Type": "Imposition", "JobID": job_id, "Status": "Completed",
                                    "Version": JDF_VERSION, "DescriptiveName": layout.kind})
    pool = ET.SubElement(root, _tag("ResourcePool"))
    _resource(pool, "Media", "paper", "Consumable", MediaType="Paper",
              Dimension=_numbers(plan.width_pt, plan.height_pt))
    _run_list(pool, "document", source_name, plan.pages_in)
    _run_list(pool, "plate", plate_name, len(plan.plates))
    _resource(pool, "ConventionalPrintingParams", "printing", "Parameter", WorkStyle=WORK_STYLES[layout.duplex])
    if layout.booklet:
        _resource(pool, "FoldingParams", "folding", "Parameter", FoldCatalog=layout.fold_scheme or "F4-1")
    root_layout = _resource(pool, "Layout", "layout", "Parameter", PartIDKeys="SignatureName SheetName Side")
    ET.SubElement(root_layout, _tag("MediaRef"), {"rRef": "paper"})
    sheet_box = _numbers(0, 0, plan.width_pt, plan.height_pt)
    signatures: dict[int, ET.Element] = {}
    sheets: dict[int, ET.Element] = {}
    for plate in plan.plates:
        if plate.signature not in signatures:
            signatures[plate.signature] = ET.SubElement(root_layout, _tag("Layout"),
                                                        {"SignatureName": f"Sig{plate.signature + 1:03d}"})
        if plate.sheet_number not in sheets:
            sheets[plate.sheet_number] = ET.SubElement(signatures[plate.signature], _tag("Layout"), {
                "SheetName": f"Sheet{plate.sheet_number:03d}", "SurfaceContentsBox": sheet_box})
        surface = ET.SubElement(sheets[plate.sheet_number], _tag("Layout"),
                                {"Side": "Back" if plate.side == "back" else "Front"})
        for placement in plate.placements:
            _content_object(surface, placement, boxes[placement.page])
        _marks(surface, plate, _block_centre(plate, plan))
    links = ET.SubElement(root, _tag("ResourceLinkPool"))
    ET.SubElement(links, _tag("LayoutLink"), {"rRef": "layout", "Usage": "Input"})
    ET.SubElement(links, _tag("RunListLink"), {"rRef": "document", "Usage": "Input", "ProcessUsage": "Document"})
    ET.SubElement(links, _tag("RunListLink"), {"rRef": "plate", "Usage": "Output"})
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
