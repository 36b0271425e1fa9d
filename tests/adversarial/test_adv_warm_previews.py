"""Attacks on previews and the warm engine child: two tenants' jobs in one warm child, a preview that
runs out of time half way, a plate pdfium cannot open. Real engine child processes, real PDFs,
pixels read back with Pillow."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import psutil
import pytest
from PIL import Image

from imposition.engine import SlugInfo, isolation, parse_layout
from imposition.engine.backends import PikepdfEngine
from imposition.engine.errors import ImpositionError, PreviewFailed
from imposition.common.settings import Settings

MM = 72 / 25.4
A6_PT = (105 * MM, 148 * MM)
ONE_UP = {"layout": "n_up", "sheet": "A5", "orientation": "portrait", "columns": 1, "rows": 1}
FOUR_UP = {"layout": "n_up", "sheet": "A3", "orientation": "portrait", "columns": 2, "rows": 2, "scaling": "none",
           "gutter_mm": 10}


def pages(path: Path, count: int, gray: float) -> Path:
    """``count`` A6 pages filled with gray level ``gray`` (0 black, 1 white)."""
    with pikepdf.new() as pdf:
        for _ in range(count):
            page = pdf.add_blank_page(page_size=A6_PT)
            page.obj.Contents = pdf.make_stream(f"{gray} g 0 0 {A6_PT[0]:.3f} {A6_PT[1]:.3f} re f".encode())
        pdf.save(path)
    return path


def dark_share(image: Image.Image) -> float:
    rgb = image.convert("RGB")
    px = list(rgb.getdata())
    return sum(1 for p in px if max(p) < 64) / len(px)


def engine_children() -> set[int]:
    return {c.pid for c in psutil.Process().children() if "imposition.engine.child" in " ".join(c.cmdline())}


@pytest.fixture
def warm():
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    isolation.keep_warm(isolation.WarmPolicy(max_jobs=100, max_rss_bytes=512 * 1024**2))
    try:
        yield
    finally:
        isolation.stop_warm()
        left = [c for c in psutil.Process().children(recursive=True) if c.pid not in before]
        assert [c for c in left if c.status() != psutil.STATUS_ZOMBIE] == []


@pytest.fixture
def settings() -> Settings:
    return Settings(engine="pikepdf", engine_time_limit_s=60)


def test_two_tenants_in_one_warm_child_share_nothing(warm, settings, tmp_path):
    """Tenant A's black job then tenant B's white job in the same warm child: B's plate carries B's
    slug only, B's previews are B's (white), as many as B's sides."""
    engine = PikepdfEngine(settings)
    pid, _ = isolation.warm_child()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir(), b_dir.mkdir()
    a = engine.impose(pages(tmp_path / "a.pdf", 8, 0), parse_layout(FOUR_UP), a_dir / "plate.pdf",
                      slug=SlugInfo(job_id="job-a", tenant_id="secret-tenant-a", date="2026-01-01"),
                      preview_dir=a_dir)
    b = engine.impose(pages(tmp_path / "b.pdf", 3, 1), parse_layout(FOUR_UP), b_dir / "plate.pdf",
                      slug=SlugInfo(job_id="job-b", tenant_id="tenant-b", date="2026-01-02"), preview_dir=b_dir)
    assert isolation.warm_child() == (pid, 4)  # impose + preview of each, in the one child
    assert len(a.previews) == a.sides == 2 and len(b.previews) == b.sides == 1
    with pikepdf.open(b_dir / "plate.pdf") as plate:
        streams = b"".join(pikepdf.Page(p).obj.Contents.read_bytes() if not isinstance(pikepdf.Page(p).obj.Contents, pikepdf.Array)
                           else b"".join(s.read_bytes() for s in pikepdf.Page(p).obj.Contents) for p in plate.pages)
        raw = (b_dir / "plate.pdf").read_bytes()
    assert b"secret-tenant-a" not in streams and b"secret-tenant-a" not in raw and b"job-a" not in raw
    assert sorted(p.name for p in b_dir.glob("preview-*.png")) == ["preview-1.png"]
    with Image.open(a.previews[0]) as ia, Image.open(b.previews[0]) as ib:
        assert dark_share(ia) > 0.2 and dark_share(ib) < 0.05, (dark_share(ia), dark_share(ib))


def test_a_preview_that_runs_out_of_time_half_way_leaves_no_partial_previews(warm, settings, tmp_path):
    """A plate of 400 sides whose previews take longer than ``preview_time_limit_s``: the plate ships
    whole with the warning ``preview_failed``, no preview file is left behind (the report names
    none), the warm child is replaced and the next job has its previews."""
    engine = PikepdfEngine(settings.model_copy(update={"preview_time_limit_s": 1.5}))
    pid, _ = isolation.warm_child()
    report = engine.impose(pages(tmp_path / "in.pdf", 400, 0.5), parse_layout(ONE_UP), tmp_path / "plate.pdf",
                           preview_dir=tmp_path)
    assert [w.code for w in report.warnings] == ["preview_failed"], report.warnings
    assert report.previews == ()
    with pikepdf.open(tmp_path / "plate.pdf") as plate:
        assert len(plate.pages) == report.sides == 400
    new = isolation.warm_child()
    assert new is not None and new[0] != pid and engine_children() == {new[0]}
    nxt = tmp_path / "next"
    nxt.mkdir()
    again = PikepdfEngine(settings).impose(pages(tmp_path / "n.pdf", 2, 0), parse_layout(ONE_UP), nxt / "plate.pdf",
                                           preview_dir=nxt)
    assert len(again.previews) == again.sides == 2 and not again.warnings
    left = sorted(p.name for p in tmp_path.glob("preview-*.png"))
    assert left == [], f"{len(left)} preview file(s) of a failed preview left in the preview folder: {left[:3]}..."


def test_a_plate_pdfium_cannot_open_is_a_typed_preview_failure_and_the_child_serves_on(warm, settings, tmp_path):
    engine = PikepdfEngine(settings)
    pid, _ = isolation.warm_child()
    garbage = tmp_path / "plate.pdf"
    garbage.write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 1000)
    with pytest.raises(ImpositionError) as refused:
        engine.previews(garbage, tmp_path)
    assert refused.value.code == PreviewFailed.code, refused.value
    assert isolation.warm_child() == (pid, 1)
    report = engine.impose(pages(tmp_path / "ok.pdf", 2, 0), parse_layout(ONE_UP), tmp_path / "ok-plate.pdf",
                           preview_dir=tmp_path)
    assert len(report.previews) == 2


def test_a_truncated_plate_preview_is_typed(warm, settings, tmp_path):
    """A plate cut short after the engine wrote it (a disk filling up): the preview fails typed."""
    engine = PikepdfEngine(settings)
    src = pages(tmp_path / "in.pdf", 8, 0)
    engine.impose(src, parse_layout(FOUR_UP), tmp_path / "plate.pdf")
    data = (tmp_path / "plate.pdf").read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: len(data) // 3])
    try:
        previews = engine.previews(cut, tmp_path)
    except ImpositionError as exc:
        assert exc.code in (PreviewFailed.code, "engine_crashed"), exc
    else:
        assert len(previews) <= 2
