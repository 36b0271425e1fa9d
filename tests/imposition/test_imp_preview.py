"""PNG previews of each side of a plate (``Engine.impose(preview_dir=...)``, ``imposition impose
--preview``): one per side, the sheet's aspect ratio, ink where the plate has ink; a preview that
fails is the warning ``preview_failed`` and the plate still ships.

Real PDFs, the real engine child, pixels read back with Pillow."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pytest
from click.testing import CliRunner
from PIL import Image

from imposition.engine import parse_layout
from imposition.engine.cli import impose_command
from imposition.engine.backends import PikepdfEngine

MM = 72 / 25.4
A6_PT = (105 * MM, 148 * MM)
A3_MM = (297, 420)
#: Four black A6 pages, 2 × 2 on A3 at 100 % with a 10 mm gutter: a 220 × 306 mm block centred on the
#: sheet, pages at x 38.5–143.5 and 153.5–258.5 mm, y 57–205 and 215–363 mm.
FOUR_UP = {"layout": "n_up", "sheet": "A3", "orientation": "portrait", "columns": 2, "rows": 2, "scaling": "none",
           "gutter_mm": 10}
PAGE_CENTRES_MM = [(91, 131), (206, 131), (91, 289), (206, 289)]
BLANK_MM = [(148.5, 210), (148.5, 131), (91, 210), (20, 30), (280, 400), (148.5, 50), (148.5, 380)]


def black_pages(path: Path, count: int = 4) -> Path:
    """``count`` A6 pages, each filled black edge to edge."""
    with pikepdf.new() as pdf:
        for _ in range(count):
            page = pdf.add_blank_page(page_size=A6_PT)
            page.obj.Contents = pdf.make_stream(f"0 g 0 0 {A6_PT[0]:.3f} {A6_PT[1]:.3f} re f".encode())
        pdf.save(path)
    return path


def dark(pixel) -> bool:
    return max(pixel[:3]) < 64


def dark_share(image: Image.Image) -> float:
    grey = image.convert("L")
    return sum(count for value, count in enumerate(grey.histogram()) if value < 64) / (image.width * image.height)


def test_each_side_has_a_preview_of_the_sheets_shape_with_ink_where_the_pages_are(settings, tmp_path):
    previews = tmp_path / "previews"
    previews.mkdir()
    engine = PikepdfEngine(settings)
    report = engine.impose(black_pages(tmp_path / "in.pdf"), parse_layout(FOUR_UP), tmp_path / "plate.pdf",
                           preview_dir=previews)
    assert report.warnings == ()
    assert [p.name for p in report.previews] == [f"preview-{n}.png" for n in range(1, report.sides + 1)]
    with Image.open(report.previews[0]) as image:
        image.load()
    width_px, height_px = image.size
    assert max(width_px, height_px) == settings.preview_max_px
    assert abs(width_px / height_px - A3_MM[0] / A3_MM[1]) < 0.005  # the sheet's aspect ratio, portrait
    px_per_mm = width_px / A3_MM[0]

    def at(x_mm, y_mm):  # PDF y runs up, image rows down
        return image.getpixel((int(x_mm * px_per_mm), int((A3_MM[1] - y_mm) * px_per_mm)))

    assert all(dark(at(*centre)) for centre in PAGE_CENTRES_MM)
    assert not any(dark(at(*point)) for point in BLANK_MM)  # the gutters, the margins, the corners
    pages_share = 4 * 105 * 148 / (A3_MM[0] * A3_MM[1])  # 49.8 % of the sheet is page
    assert abs(dark_share(image) - pages_share) < 0.02


def test_preview_size_is_a_setting(settings, tmp_path):
    engine = PikepdfEngine(settings.model_copy(update={"preview_max_px": 200}))
    report = engine.impose(black_pages(tmp_path / "in.pdf"), parse_layout(FOUR_UP), tmp_path / "plate.pdf",
                           preview_dir=tmp_path)
    with Image.open(report.previews[0]) as image:
        assert max(image.size) == 200 and image.size[0] < image.size[1]


def test_a_preview_that_fails_is_a_warning_and_the_plate_ships(settings, tmp_path):
    engine = PikepdfEngine(settings.model_copy(update={"preview_time_limit_s": 0.001}))
    report = engine.impose(black_pages(tmp_path / "in.pdf"), parse_layout(FOUR_UP), tmp_path / "plate.pdf",
                           preview_dir=tmp_path)
    assert report.previews == ()
    assert [w.code for w in report.warnings] == ["preview_failed"]
    assert "time_limit" in report.warnings[0].message
    with pikepdf.open(tmp_path / "plate.pdf") as plate:
        assert len(plate.pages) == report.sides == 1
    assert list(tmp_path.glob("preview-*.png")) == []


def test_a_plate_with_more_sides_than_preview_max_sides_ships_without_previews(settings, tmp_path):
    # The preview keys are stored on the job item (DynamoDB: 400 KB an item), so their number is bounded.
    engine = PikepdfEngine(settings.model_copy(update={"preview_max_sides": 1}))
    report = engine.impose(black_pages(tmp_path / "in.pdf", count=8), parse_layout(FOUR_UP), tmp_path / "plate.pdf",
                           preview_dir=tmp_path)
    assert report.sides == 2 and report.previews == ()
    assert [w.code for w in report.warnings] == ["preview_failed"]
    assert "2 sides, more than preview_max_sides=1" in report.warnings[0].message
    assert list(tmp_path.glob("preview-*.png")) == []


def test_a_preview_failure_does_not_fail_a_layout_that_fails_on_warnings(settings, tmp_path):
    """``on_warning: fail`` is about departures of the plate from its layout; a missing preview is not
    one: the plate is what was asked."""
    engine = PikepdfEngine(settings.model_copy(update={"preview_time_limit_s": 0.001}))
    report = engine.impose(black_pages(tmp_path / "in.pdf"), parse_layout({**FOUR_UP, "on_warning": "fail"}),
                           tmp_path / "plate.pdf", preview_dir=tmp_path)
    assert [w.code for w in report.warnings] == ["preview_failed"] and (tmp_path / "plate.pdf").exists()


@pytest.mark.parametrize("prestart", ["--prestart", "--no-prestart"])
def test_impose_command_writes_and_names_the_previews(tmp_path, prestart):
    source, previews = black_pages(tmp_path / "in.pdf", 8), tmp_path / "previews"
    previews.mkdir()
    layout = '{"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}'
    result = CliRunner().invoke(impose_command, [str(source), "--layout", layout, "-o", str(tmp_path / "plate.pdf"),
                                                 "--preview", str(previews), prestart], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    names = [f"preview-{n}.png" for n in range(1, 5)]
    assert [line.split()[-1] for line in result.output.splitlines() if line.startswith("preview ")] == \
        [str(previews / name) for name in names]
    assert sorted(p.name for p in previews.iterdir()) == names
    with Image.open(previews / names[0]) as image:
        width_px, height_px = image.size
        assert abs(width_px / height_px - 297 / 210) < 0.005  # A4 landscape
        assert 0.3 < dark_share(image) < 0.7  # two black A6 pages on the A4 side


def test_impose_command_refuses_a_preview_folder_that_does_not_exist(tmp_path):
    source = black_pages(tmp_path / "in.pdf")
    result = CliRunner().invoke(impose_command, [str(source), "--layout", '{"layout": "saddle_stitch", "sheet": "A4"}',
                                                 "-o", str(tmp_path / "plate.pdf"), "--preview", str(tmp_path / "no")])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "plate.pdf").exists()
