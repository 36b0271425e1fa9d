"""The JDF Layout written beside each plate (imposition.engine.jdf), checked against the plate itself.

Every shipped sample layout (all five kinds) is imposed, its ``<plate>.jdf`` parsed with
xml.etree, and each part compared with what the plate's own operators draw (read back with pikepdf
and pdfminer): the surfaces are the plate's pages, the Media its page size, each ContentObject's
CTM the ``cm`` the plate draws that page with, its TrimCTM and TrimSize the page's trim on the
sheet, its ClipBox the clip, and the marks where the plate strokes and fills them.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pikepdf
import pytest

from imposition.common.settings import get_settings
from imposition.engine import get_engine, parse_layout
from .imposition_readback import circles, fills, placements, segments
from .test_imp_samples import EXPECTED_SIDES, SAMPLES, sample_inputs

NS = {"jdf": "http://www.CIP4.org/JDFSchema_1_1"}
MARK_KIND = "{urn:imposition:jdf:1}MarkKind"
#: Matrix terms and lengths agree to this (pt): the JDF writes 4 decimals, the plate its own.
CLOSE_PT = 0.01


def numbers(text: str) -> list[float]:
    return [float(v) for v in text.split()]


def apply(m: list[float], x: float, y: float) -> tuple[float, float]:
    return m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]


def bounds_of(m: list[float], box: list[float]) -> list[float]:
    x0, y0, x1, y1 = box
    corners = [apply(m, x, y) for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))]
    return [min(c[0] for c in corners), min(c[1] for c in corners), max(c[0] for c in corners),
            max(c[1] for c in corners)]


def close(a, b) -> bool:
    return all(abs(p - q) <= CLOSE_PT for p, q in zip(a, b, strict=True))


def surfaces(root: ET.Element) -> list[tuple[str, str, str, ET.Element]]:
    """``(signature, sheet, side, partition)`` of every surface, in document order."""
    found = []
    layout = root.find("jdf:ResourcePool/jdf:Layout", NS)
    assert layout is not None and layout.get("PartIDKeys") == "SignatureName SheetName Side"
    for signature in layout.findall("jdf:Layout", NS):
        for sheet in signature.findall("jdf:Layout", NS):
            assert sheet.get("SurfaceContentsBox") is not None
            found += [(signature.get("SignatureName"), sheet.get("SheetName"), side.get("Side"), side)
                      for side in sheet.findall("jdf:Layout", NS)]
    return found


def impose(tmp_path: Path, source: Path, layout: dict) -> tuple[Path, ET.Element, object]:
    output = tmp_path / "plate.pdf"
    report = get_engine(get_settings()).impose(source, parse_layout(layout), output)
    assert report.jdf == tmp_path / "plate.jdf"
    return output, ET.parse(report.jdf).getroot(), report


def check_against_plate(plate: Path, source: Path, root: ET.Element, report) -> list[list[ET.Element]]:
    """Every structural check of the JDF against the plate; the ContentObjects of each surface."""
    assert root.tag == "{http://www.CIP4.org/JDFSchema_1_1}JDF" and root.get("Type") == "Imposition"
    assert tuple(int(v) for v in root.get("Version").split(".")) >= (1, 3)
    media = root.find("jdf:ResourcePool/jdf:Media", NS)
    document = root.find("jdf:ResourcePool/jdf:RunList[@ID='document']", NS)
    assert document.find("jdf:LayoutElement/jdf:FileSpec", NS).get("URL") == source.name
    with pikepdf.open(source) as pdf:
        trims = [[float(v) for v in page.trimbox] for page in pdf.pages]
    assert int(document.get("NPage")) == len(trims)
    with pikepdf.open(plate) as pdf:
        sizes = {(float(p.mediabox[2] - p.mediabox[0]), float(p.mediabox[3] - p.mediabox[1])) for p in pdf.pages}
        plate_pages = len(pdf.pages)
    assert len(sizes) == 1 and close(numbers(media.get("Dimension")), sizes.pop())
    found = surfaces(root)
    assert len(found) == plate_pages == report.sides
    assert len({sheet for _, sheet, _, _ in found}) == report.sheets
    per_surface = []
    for index, ((_, _, _, surface), drawn) in enumerate(zip(found, placements(plate, source), strict=True)):
        objects = surface.findall("jdf:ContentObject", NS)
        per_surface.append(objects)
        # a blank padding page has no ContentObject (and so no Ord): one per page the plate draws
        assert len(objects) == len(drawn)
        unmatched = list(drawn)
        for obj in objects:
            ord_ = int(obj.get("Ord"))
            ctm = numbers(obj.get("CTM"))
            same = [p for p in unmatched if p.label == f"P{ord_ + 1}" and close(p.matrix, ctm)]
            assert same, (index, ord_, ctm, [(p.label, p.matrix) for p in unmatched])
            placed = same[0]
            unmatched.remove(placed)
            assert close(bounds_of(ctm, trims[ord_]), placed.trim)  # its TrimBox lands where the plate draws it
            width, height = numbers(obj.get("TrimSize"))
            assert close(bounds_of(numbers(obj.get("TrimCTM")), [0, 0, width, height]), placed.trim)
            assert close(numbers(obj.get("ClipBox")), placed.clip)
        check_marks(plate, index, surface)
    sides = [side for _, _, side, _ in found]
    assert sides == (["Front", "Back"] * report.sheets if report.sides == 2 * report.sheets else ["Front"] * report.sides)
    return per_surface


def check_marks(plate: Path, index: int, surface: ET.Element) -> None:
    marks = {m.get(MARK_KIND): m for m in surface.findall("jdf:MarkObject", NS)}
    assert all(m.get("CTM") == "1 0 0 1 0 0" for m in marks.values())
    rings = circles(plate, index)
    registration = marks.get("registration")
    centres = sorted(numbers(r.get("Center")) for r in registration.findall("jdf:RegisterMark", NS)) if registration \
        is not None else []
    assert all(close(a, b) for a, b in zip(centres, sorted([c.x, c.y] for c in rings), strict=True))
    lines = segments(plate, index)
    half_cross = {(c.x, c.y): c.radius / 0.6 for c in rings}  # a target's cross, stroked beside its circle
    crop = [s for s in lines if not s.dashed and not any(
        abs((s.x0 + s.x1) / 2 - x) < CLOSE_PT and abs((s.y0 + s.y1) / 2 - y) < CLOSE_PT for x, y in half_cross)]
    cut_marks = marks["crop"].findall("jdf:CutMark", NS) if "crop" in marks else []
    assert len(cut_marks) == len(crop)
    for cut in cut_marks:  # each CutMark's position is an end of a crop stroke
        x, y = numbers(cut.get("Position"))
        assert any(close((x, y), (s.x0, s.y0)) or close((x, y), (s.x1, s.y1)) for s in crop), (x, y)
    folds = [s for s in lines if s.dashed]
    assert ("fold" in marks) == bool(folds)
    if folds:
        x0, y0, x1, y1 = numbers(marks["fold"].get("ClipBox"))
        assert all(x0 <= min(s.x0, s.x1) and max(s.x0, s.x1) <= x1 and y0 <= min(s.y0, s.y1) and max(s.y0, s.y1) <= y1
                   for s in folds)
    filled = fills(plate, index)
    strip = marks["colour_bar"].find("jdf:ColorControlStrip", NS) if "colour_bar" in marks else None
    in_bar = []
    if strip is not None:
        (cx, cy), (w, h) = numbers(strip.get("Center")), numbers(strip.get("Size"))
        in_bar = [f for f in filled if cx - w / 2 - CLOSE_PT <= f.rect[0] and f.rect[2] <= cx + w / 2 + CLOSE_PT
                  and cy - h / 2 - CLOSE_PT <= f.rect[1] and f.rect[3] <= cy + h / 2 + CLOSE_PT]
        assert {(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), "All"} <= {f.colour for f in in_bar}
    others = [f for f in filled if f not in in_bar]
    if "collation" in marks:
        assert [list(f.rect) for f in others if close(f.rect, numbers(marks["collation"].get("ClipBox")))]
    else:
        assert others == []


@pytest.mark.parametrize("name", sorted(EXPECTED_SIDES))
def test_sample_layouts_jdf_matches_the_plate(tmp_path, name):
    asked = json.loads((SAMPLES / "layouts" / name).read_text())
    source = SAMPLES / sample_inputs()[name]
    resolved = parse_layout(asked).resolved()
    plate, root, report = impose(tmp_path, source, asked)
    per_surface = check_against_plate(plate, source, root, report)
    ords = Counter(int(o.get("Ord")) for objects in per_surface for o in objects)
    if asked["layout"] == "step_and_repeat":  # the listed pages, once per copy on the plate
        pages = {entry["page"] - 1 for entry in asked.get("gang", [])} or {0}
        assert set(ords) == pages
    else:  # every page once
        assert ords == Counter(range(report.pages_in))
    folding = root.find("jdf:ResourcePool/jdf:FoldingParams", NS)
    if asked["layout"] in ("saddle_stitch", "perfect_bound"):
        assert folding.get("FoldCatalog") == (resolved.fold_scheme or "F4-1")
        # a fold scheme folds each sheet into a signature of its own; 2-up sections nest
        # signature_pages (perfect bound) or all pages (saddle stitch) into one
        pages = report.pages_in + report.blank_pages
        signatures = {signature for signature, _, _, _ in surfaces(root)}
        assert len(signatures) == (report.sheets if resolved.fold_scheme else pages // (resolved.signature_pages or pages))
    else:
        assert folding is None


def test_rotated_pages_carry_their_turn_in_the_ctm(tmp_path, case):
    source = case("rotate90_even_8p.pdf")
    plate, root, report = impose(tmp_path, source, {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2,
                                                    "crop_marks": True, "scaling": "fit"})
    per_surface = check_against_plate(plate, source, root, report)
    turned = [o for objects in per_surface for o in objects if int(o.get("Ord")) % 2 == 1]
    assert turned and all(numbers(o.get("CTM"))[0] == 0 for o in turned)  # a quarter turn: a = 0


def test_padding_blanks_have_no_content_object(tmp_path, case):
    source = case("a5_13p_odd.pdf")
    plate, root, report = impose(tmp_path, source, {"layout": "saddle_stitch", "sheet": "A4",
                                                    "orientation": "landscape", "fold_marks": True})
    per_surface = check_against_plate(plate, source, root, report)
    assert report.blank_pages == 3
    objects = [o for side in per_surface for o in side]
    assert len(objects) == 2 * report.sides - report.blank_pages == 13
    assert all(o.get("Ord") is not None and int(o.get("Ord")) >= 0 for o in objects)
    assert Counter(int(o.get("Ord")) for o in objects) == Counter(range(13))
