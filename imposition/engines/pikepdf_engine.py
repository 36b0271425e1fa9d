"""The default engine: pages placed as Form XObjects on new sheets, with pikepdf (qpdf).

Each source page becomes one Form XObject (PDF 32000-1 §8.10) made from its own content and its own
/Resources, so two pages that both name an image ``/Im0`` keep their own image, and a content
stream that leaves the graphics state unbalanced cannot leak: the ``Do`` operator saves and
restores the graphics state around a form (§8.10.1), and each placement is wrapped in ``q … Q``.
The form's /BBox is the page's visible region (CropBox ∩ MediaBox) in its own user space, so only
what a viewer shows can appear, positioned by its own origin; on the sheet each placement is
clipped to its trim plus the bleed it keeps (qpdf's own page-to-form helper clips to the TrimBox,
which would lose the bleed). /Rotate and /UserUnit are folded into the placement matrix.

Annotations are flattened first (their appearance streams merged into the page content, after
generating missing appearances of form fields), so nothing visible is lost.

The content stream of a page is turned into the form in place when only one form needs it: its
data is then copied by qpdf straight from the source file, never through Python. Pages that share
a content stream, resources and boxes share one form.
"""

from __future__ import annotations

from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name

from ..geometry import PageBoxes, Rect
from ..marks import REGISTRATION_COLOUR_SPACE, SLUG_FONT, marks_operators, slug_operators
from ..planning import SLUG_ORIGIN_PT, ImpositionPlan, Placement
from ..source import inherited
from .base import Engine, EngineJob, Placed


def _number(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


class _Forms:
    """The Form XObjects of the source pages, made in the source and copied into the output at once."""

    def __init__(self, source: pikepdf.Pdf, boxes: list[PageBoxes]) -> None:
        self.source = source
        self.boxes = boxes
        self.pages = list(source.pages)
        self._claimed_streams: set[tuple[int, int]] = set()

    def copy_into(self, output: pikepdf.Pdf, page_indexes: list[int]) -> dict[int, pikepdf.Object]:
        """The output's Form XObject of each page in ``page_indexes`` (0-based).

        One ``copy_foreign`` call copies every form with everything it references, each shared
        object (a font, an image used on many pages) once.
        """
        by_key: dict[tuple, int] = {}
        made: list[pikepdf.Object] = []
        slot_of_page: dict[int, int] = {}
        for page_index in page_indexes:
            key, form = self._make(page_index, by_key)
            if form is not None:
                by_key[key] = len(made)
                made.append(form)
            slot_of_page[page_index] = by_key[key]
        copied = output.copy_foreign(self.source.make_indirect(Array(made)))
        return {page_index: copied[slot] for page_index, slot in slot_of_page.items()}

    def _make(self, page_index: int, known: dict[tuple, int]) -> tuple[tuple, pikepdf.Object | None]:
        """The page's sharing key and its new form, or None when a page with the same key has one."""
        page = self.pages[page_index].obj
        crop = self.boxes[page_index].crop
        contents = page.get("/Contents")
        resources = inherited(page, "/Resources")
        group = page.get("/Group")
        key = (
            _identity(contents) or ("page", page_index),
            _identity(resources) or ("page", page_index),
            (crop.x0, crop.y0, crop.x1, crop.y1),
            _identity(group),
        )
        if key in known:
            return key, None
        form = self._stream_for(contents)
        form.Type = Name.XObject
        form.Subtype = Name.Form
        form.BBox = Array([crop.x0, crop.y0, crop.x1, crop.y1])
        form.Resources = resources if resources is not None else Dictionary()
        if group is not None:
            form.Group = group
        return key, form

    def _stream_for(self, contents: pikepdf.Object | None) -> pikepdf.Stream:
        """A source stream holding the page's content that no other form uses."""
        if isinstance(contents, pikepdf.Stream):
            if contents.is_indirect and contents.objgen not in self._claimed_streams:
                self._claimed_streams.add(contents.objgen)
                return contents  # zero copy: the content stream becomes the form
            stream = pikepdf.Stream(self.source, b"")
            stream.write(contents.read_raw_bytes(), filter=contents.get("/Filter"),
                         decode_parms=contents.get("/DecodeParms"))
            return stream
        parts = list(contents) if isinstance(contents, Array) else []
        data = b"\n".join(part.read_bytes() for part in parts if isinstance(part, pikepdf.Stream))
        return pikepdf.Stream(self.source, data)

def _identity(obj: pikepdf.Object | None) -> tuple | None:
    if obj is None or not obj.is_indirect:
        return None
    return obj.objgen


def _flatten_annotations(source: pikepdf.Pdf) -> None:
    """Merge every visible annotation's appearance into its page's content (qpdf's flattening, 'all')."""
    if not any("/Annots" in page.obj for page in source.pages):
        return
    if "/AcroForm" in source.Root:
        source.generate_appearance_streams()
    source.flatten_annotations(mode="all")


def _placement_operators(placement: Placement, name: str) -> bytes:
    clip: Rect = placement.clip
    matrix = " ".join(_number(v) for v in placement.matrix)
    return (
        f"q {_number(clip.x0)} {_number(clip.y0)} {_number(clip.width)} {_number(clip.height)} re W n "
        f"{matrix} cm {name} Do Q\n"
    ).encode("ascii")


def _shared_resources(output: pikepdf.Pdf) -> tuple[pikepdf.Object, pikepdf.Object]:
    """The registration colour space (/Separation /All, tint 1 = 100 % of every process ink) and the
    slug font (Helvetica, WinAnsiEncoding), one indirect object each."""
    tint = Dictionary(FunctionType=2, Domain=[0, 1], C0=[0, 0, 0, 0], C1=[1, 1, 1, 1], N=1)
    colour_space = output.make_indirect(Array([Name.Separation, Name.All, Name.DeviceCMYK, tint]))
    font = output.make_indirect(
        Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica, Encoding=Name.WinAnsiEncoding)
    )
    return colour_space, font


def draw_plan(source: pikepdf.Pdf, boxes: list[PageBoxes], plan: ImpositionPlan, output_path: Path) -> None:
    """Draw ``plan`` with the pages of ``source`` (whose boxes are ``boxes``) and save it to ``output_path``.

    Runs in the engine's child process. Raises pikepdf.PdfError when the source turns out damaged
    while its objects are read (the child maps it to DamagedPdf).
    """
    _flatten_annotations(source)
    with pikepdf.new() as output:
        used = sorted({placement.page for plate in plan.plates for placement in plate.placements})
        forms = _Forms(source, boxes).copy_into(output, used)
        colour_space, font = _shared_resources(output)
        for plate in plan.plates:
            xobjects = Dictionary()
            content = bytearray()
            for placement in plate.placements:
                name = f"/P{placement.page}"
                xobjects[name] = forms[placement.page]
                content += _placement_operators(placement, name)
            content += marks_operators(plate.marks)
            if plate.slug_line:
                content += slug_operators(plate.slug_line, *SLUG_ORIGIN_PT)
            sheet = output.add_blank_page(page_size=(plan.width_pt, plan.height_pt))
            sheet.obj.Resources = Dictionary(
                XObject=xobjects,
                ColorSpace=Dictionary({REGISTRATION_COLOUR_SPACE: colour_space}),
                Font=Dictionary({SLUG_FONT: font}),
            )
            sheet.obj.Contents = output.make_stream(bytes(content))
        output.save(output_path, deterministic_id=True)  # same job, same bytes: a fenced-out zombie could only rewrite identical bytes


class PikepdfEngine(Engine):
    """The open engine (``settings.engine = "pikepdf"``): plans and draws in a limited child process."""

    name = "pikepdf"

    def _place(self, job: EngineJob) -> Placed:
        result = self.run_child(job, "impose")
        return Placed(result["sheets"], result["sides"], result["pages_in"], result["blank_pages"])
