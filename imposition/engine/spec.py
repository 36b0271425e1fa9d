"""The layout specification: a JSON document, validated with pydantic.

One model per layout, told apart by the ``layout`` field::

    {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
    {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2,
     "gutter_mm": 5, "crop_marks": true}
    {"layout": "step_and_repeat", "sheet": "SRA3", "pages": [1]}
    {"layout": "cut_and_stack", "sheet": "SRA3", "columns": 2, "rows": 2}
    {"layout": "perfect_bound", "sheet": "SRA3", "signature_pages": 16}
    {"layout": "perfect_bound", "sheet": "SRA2", "fold_scheme": "F32-5", "collation_marks": true}
    {"layout": "step_and_repeat", "sheet": "SRA3", "gang": [{"page": 1, "copies": 6}, {"page": 2}]}
    {"layout": "saddle_stitch", "sheet": "SRA3", "bleed_mm": 3, "rotate_to_fit": "spine"}
    {"layout": "perfect_bound", "press": "sm74", "fold_scheme": "F16-7", "grind_off_mm": 3, "bleed_mm": 3}

Units are in the field names (``_mm`` millimetres, ``_pt`` PDF points). Page numbers are 1-based, as
a print shop counts them. Unknown fields are rejected, so a typo never passes silently. Types are
strict, as a specification's should be: ``"columns": "2"`` or ``true``, ``"crop_marks": "yes"``, a key
given twice in the JSON text are all refused (a length in millimetres may be written as an integer).
A layout whose margins or gutters leave no room on its sheet in every orientation it allows is refused
here, before any PDF is read.

:func:`parse_layout` is the only entry point; it raises :class:`~imposition.engine.errors.InvalidLayout`
naming each bad field, its value (cut short: :func:`~imposition.engine.errors.shown`) and the limit it breaks.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from .errors import InvalidLayout, clipped, shown
from .folds import FOLD_SCHEME_NAMES, FOLD_SCHEMES, SCHEME_FOR_SIGNATURE_PAGES, SECTIONS, FoldScheme
from .job import BlankPagesAt, Layout, ShopDefaults
from .presses import PRESS_NAMES, PRESSES, Press
from .sheets import mm_to_pt, preset_names, preset_size_mm, pt_to_mm

#: PDF page size limits in default user space units (PDF 32000-1 Annex C.2): 3 to 14 400.
MIN_SHEET_PT = 3.0
MAX_SHEET_PT = 14_400.0
#: Highest page number a layout may name: a page is an indirect object, and a PDF holds at most
#: 8 388 607 of them (PDF 32000-1 Annex C.2, Table C.1).
MAX_PAGE_NUMBER = 8_388_607
#: Deepest nesting of objects and arrays a layout may have. A layout needs 2 (``sheet``,
#: ``margin_mm``, ``pages``); deeper input is refused before validation, which would recurse into it.
MAX_LAYOUT_NESTING = 4
#: At most this many problems are listed in one InvalidLayout message (the rest are counted).
MAX_PROBLEMS_SHOWN = 10
#: Longest description of one problem in an InvalidLayout message (characters).
PROBLEM_LIMIT_CHARS = 300

Orientation = Literal["auto", "portrait", "landscape"]
#: How the two sides of a sheet are printed: ``sheetwise`` (a plate per side), ``work_and_turn``
#: (both sides on one plate, the sheet turned side to side), ``work_and_tumble`` (turned head to foot).
Duplex = Literal["sheetwise", "work_and_turn", "work_and_tumble"]
Binding = Literal["left_to_right", "right_to_left"]
#: How a page whose orientation differs from its cell's is turned: ``none`` (as a viewer shows it,
#: shrunk to fit), 90° ``ccw`` (its head to the left) or ``cw``; booklets also ``spine`` (its head
#: toward the spine) and ``fore_edge`` (toward the fore edge).
RotateToFit = Literal["none", "ccw", "cw", "spine", "fore_edge"]
if TYPE_CHECKING:
    PressName = str
else:
    #: A press preset of :mod:`imposition.engine.presses`.
    PressName = Literal[PRESS_NAMES]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class CustomSheet(_Strict):
    """A sheet size given in millimetres or in points (both sides in the same unit)."""

    width_mm: float | None = Field(default=None, gt=0)
    height_mm: float | None = Field(default=None, gt=0)
    width_pt: float | None = Field(default=None, gt=0)
    height_pt: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_unit(self) -> "CustomSheet":
        given = sum(v is not None for v in (self.width_mm, self.height_mm, self.width_pt, self.height_pt))
        has_mm = self.width_mm is not None and self.height_mm is not None
        has_pt = self.width_pt is not None and self.height_pt is not None
        if given != 2 or not (has_mm or has_pt):
            raise ValueError("give either width_mm and height_mm, or width_pt and height_pt")
        return self

    def size_pt(self) -> tuple[float, float]:
        """``(width_pt, height_pt)`` as given (not yet turned by the orientation)."""
        if self.width_mm is not None and self.height_mm is not None:
            return mm_to_pt(self.width_mm), mm_to_pt(self.height_mm)
        assert self.width_pt is not None and self.height_pt is not None
        return self.width_pt, self.height_pt


class Margins(_Strict):
    """Unprintable or reserved edges of the sheet, in millimetres (as seen on the front)."""

    top_mm: float = Field(default=0.0, ge=0, le=200)
    right_mm: float = Field(default=0.0, ge=0, le=200)
    bottom_mm: float = Field(default=0.0, ge=0, le=200)
    left_mm: float = Field(default=0.0, ge=0, le=200)


class LayoutSpec(_Strict):
    """Options common to every layout.

    Attributes:
        sheet: a preset name (A0–A5, SRA2, SRA3, B1, B2, Letter, Legal, Tabloid, 12x18 in) or a
            :class:`CustomSheet`; may be left out when ``press`` is named (the press's largest sheet).
        press: a press preset (``sm52``, ``sm74``, ``sm102``: :mod:`imposition.engine.presses`): it
            sets the sheet (unless given), keeps only the orientations the press feeds (the plate's
            foot is the gripper edge, its width across the press), the gripper (``gripper_mm`` may
            only be larger), the margins (side lays and tail, unless ``margin_mm`` is given) and a
            colour bar (when asked) over the whole printable width, a solid of each ink per ink zone.
        orientation: ``portrait``/``landscape`` turn the sheet; ``auto`` tries both and keeps the one
            that places the pages largest (step-and-repeat: the one holding most copies).
        margin_mm: one margin for every edge, or :class:`Margins` per edge; cells stay inside.
        bleed_mm: bleed kept around each page's trim, taken from its BleedBox (PDF 32000-1 §14.11.2),
            limited by the bleed the page has and by half the space to the neighbouring page.
        crop_marks: trim marks at the corners of every placed page, outside its trim and bleed.
        crop_mark_length_mm, crop_mark_offset_mm: size of a mark, and its gap from the trim corner
            (at least ``bleed_mm``, so marks never print on the bleed).
        slug: a slug line (job, tenant, sheet n of m, side, date) in a free strip outside every trim,
            bleed and mark, at the foot of the plate (else at its head); room for it is reserved.
        scaling: ``none`` (default) places every page at 100 % and fails with ``page_too_large``
            (naming the pages, the cell and the scale that would fit) if a page does not fit its cell;
            ``fit`` shrinks a page that is larger than its cell (never enlarges) and centres it, with
            the warning ``scaled_to_fit``.
        gripper_mm: the press's gripper, a strip at the lead edge (the foot of the front) where nothing
            prints; added to the foot margin (work and tumble: to both head and foot). Left out with
            no press named, pages may use the strip but every mark keeps outside the default gripper
            (``settings.default_gripper_mm``, 10 mm), the block moved toward the head when that makes
            room (a ``no_room_for_marks`` warning names the default edge when it cannot).
        margin_mm: see above; left out with no press named, pages may use the sheet's edges but every
            mark keeps outside the default tail (``settings.default_tail_mm``, at the head) and sides
            (``settings.default_side_mm``).
        rotate_to_fit: ``none`` (default: a page is placed as a viewer shows it), ``ccw`` or ``cw``: a
            page whose orientation (portrait, landscape)
            differs from its cell's is turned 90° that way (n-up, cut and stack; step and repeat
            turns the pages when that holds more copies); booklets also take ``spine`` and
            ``fore_edge`` (each page's head toward that edge): see :class:`_Booklet`.
        on_warning: ``warn`` records every departure from what was asked (scaled to fit, marks,
            bleed or slug that could not be drawn whole, a repaired file) as a typed warning in the
            report; ``fail`` fails the job with the first one's code instead.
        registration_marks: a registration target (circle and cross, ``registration_mark_size_mm``
            across) at the middle of each edge of the block of pages, outside its trims, bleed and
            crop or fold marks; room for them is reserved.
        colour_bar: a colour bar across the head of the plate (patches ``colour_bar_height_mm``
            square: C, M, Y, K solid, the registration colour, C, M, Y, K at 50 %), above every
            other mark; room for it is reserved.
    """

    layout: str
    sheet: str | CustomSheet | None = None
    press: PressName | None = None
    orientation: Orientation = "auto"
    margin_mm: Annotated[float, Field(ge=0, le=200)] | Margins = 0.0
    bleed_mm: float = Field(default=0.0, ge=0, le=25)
    crop_marks: bool = False
    crop_mark_length_mm: float = Field(default=5.0, gt=0, le=30)
    crop_mark_offset_mm: float = Field(default=3.0, ge=0, le=30)
    slug: bool = False
    scaling: Literal["fit", "none"] = "none"
    gripper_mm: float = Field(default=0.0, ge=0, le=100)
    on_warning: Literal["warn", "fail"] = "warn"
    registration_marks: bool = False
    registration_mark_size_mm: float = Field(default=5.0, ge=2, le=20)
    colour_bar: bool = False
    colour_bar_height_mm: float = Field(default=5.0, ge=3, le=15)
    rotate_to_fit: RotateToFit = "none"

    @field_validator("sheet")
    @classmethod
    def _known_sheet(cls, value: str | CustomSheet | None) -> str | CustomSheet | None:
        if isinstance(value, str) and preset_size_mm(value) is None:
            raise ValueError(f"unknown sheet preset; presets: {', '.join(preset_names())}")
        if isinstance(value, CustomSheet):
            for side_pt in value.size_pt():
                if not MIN_SHEET_PT <= side_pt <= MAX_SHEET_PT:
                    raise ValueError(
                        f"sheet side {side_pt:g} pt is outside the PDF page size limits "
                        f"{MIN_SHEET_PT:g}..{MAX_SHEET_PT:g} pt (PDF 32000-1 Annex C.2)"
                    )
        return value

    @model_validator(mode="after")
    def _room_on_the_sheet(self) -> "LayoutSpec":
        if self.sheet is None and self.press is None:
            raise ValueError("sheet: missing field (give a sheet, or a press whose largest sheet is used)")
        press = self.press_preset()
        if press is not None and "gripper_mm" in self.model_fields_set and self.gripper_mm < press.gripper_mm:
            raise ValueError(f"gripper_mm={self.gripper_mm:g}: less than the {press.gripper_mm:g} mm gripper of press "
                             f"{press.describe()}; give at least {press.gripper_mm:g} or leave it out")
        if self.layout not in ("saddle_stitch", "perfect_bound") and self.rotate_to_fit in ("spine", "fore_edge"):
            raise ValueError(f"rotate_to_fit={self.rotate_to_fit!r}: only booklets have a spine; give 'ccw', 'cw' "
                             f"or 'none'")
        layout = self.resolved(ShopDefaults())  # the room checked here does not depend on the settings
        if press is not None and not any(layout.press_feeds(size) for size in layout.sheet_sizes_pt()):
            width, height = (pt_to_mm(v) for v in sorted(layout.sheet_size_pt))
            raise ValueError(
                f"sheet={shown(self.sheet if isinstance(self.sheet, str) else 'custom')}: {width:.0f} × {height:.0f} mm "
                f"does not feed on press {press.describe()} in orientation {self.orientation!r}; give a sheet "
                f"within {press.max_sheet_mm[0]:g} × {press.max_sheet_mm[1]:g} mm and at least "
                f"{press.min_sheet_mm[0]:g} × {press.min_sheet_mm[1]:g} mm, or another press"
            )
        problems = [layout.room_problem(*size) for size in layout.sheet_sizes_pt()]
        if all(problems):  # under ``auto`` both orientations were tried: the first, portrait, is named
            first = problems[0]
            assert first is not None  # all() held: every orientation has its problem
            raise ValueError(first + (", nor turned landscape" if len(problems) > 1 else ""))
        return self

    def press_preset(self) -> Press | None:
        """The named press, or None."""
        return PRESSES[self.press] if self.press is not None else None

    def sheet_size_pt(self) -> tuple[float, float]:
        """The sheet ``(width_pt, height_pt)`` as named (portrait for presets), before orientation;
        with no sheet named, the press's largest."""
        if isinstance(self.sheet, CustomSheet):
            return self.sheet.size_pt()
        if self.sheet is None:
            press = self.press_preset()
            assert press is not None  # checked by the validator
            return mm_to_pt(press.max_sheet_mm[0]), mm_to_pt(press.max_sheet_mm[1])
        size_mm = preset_size_mm(self.sheet)
        assert size_mm is not None  # checked by the validator
        return mm_to_pt(size_mm[0]), mm_to_pt(size_mm[1])

    def margins_pt(self) -> tuple[float, float, float, float]:
        """Margins as ``(top_pt, right_pt, bottom_pt, left_pt)`` on the front side: ``margin_mm`` as
        given, else the press's tail and side lays (nothing beyond the gripper at the foot)."""
        press = self.press_preset()
        if press is not None and "margin_mm" not in self.model_fields_set:
            side = mm_to_pt(press.side_lay_mm)
            return mm_to_pt(press.tail_mm), side, 0.0, side
        if isinstance(self.margin_mm, Margins):
            m = self.margin_mm
            return mm_to_pt(m.top_mm), mm_to_pt(m.right_mm), mm_to_pt(m.bottom_mm), mm_to_pt(m.left_mm)
        margin_pt = mm_to_pt(self.margin_mm)
        return margin_pt, margin_pt, margin_pt, margin_pt

    def resolved(self, defaults: ShopDefaults | None = None) -> Layout:
        """This layout in the planner's terms: lengths in points, every default filled in, the shop's
        (``defaults``: the non-printing edges of a sheet with no press named, the binding limits) from
        the settings (:func:`~imposition.common.settings.get_settings`) when not given.

        The engine's child process plans from this plain form (sent as JSON), never importing pydantic.
        """
        if defaults is None:
            from imposition.common.settings import get_settings

            defaults = ShopDefaults.of(get_settings())
        pages = getattr(self, "pages", None)
        gang = getattr(self, "gang", None)
        scheme, implied = self.scheme() if isinstance(self, _Booklet) else (None, False)
        press = self.press_preset()
        gripper_given = "gripper_mm" in self.model_fields_set
        gripper_mm = self.gripper_mm if gripper_given or press is None else press.gripper_mm
        trims_mm = self.trims_mm() if isinstance(self, _Booklet) else (0.0, 0.0, 0.0)
        return Layout(
            kind=self.layout,
            sheet_size_pt=self.sheet_size_pt(),
            orientation=self.orientation,
            margins_pt=self.margins_pt(),
            margin_given=repr(self.margin_mm),
            gutters_pt=self.gutters_pt() if isinstance(self, _Grid) else (0.0, 0.0),
            columns=scheme.columns if scheme else self._grid_count("columns", 2),
            rows=scheme.rows if scheme else self._grid_count("rows", 1),
            duplex=getattr(self, "duplex", "simplex"),
            binding=getattr(self, "binding", "left_to_right"),
            blank_pages_at=getattr(self, "blank_pages_at", "end"),
            creep_pt=mm_to_pt(getattr(self, "creep_mm", 0.0)),
            signature_pages=self.signature_pages_or_default() if isinstance(self, PerfectBound) else 0,
            pages=tuple(pages) if pages else None,
            bleed_pt=mm_to_pt(self.bleed_mm),
            crop_marks=self.crop_marks,
            crop_mark_length_pt=mm_to_pt(self.crop_mark_length_mm),
            crop_mark_offset_pt=mm_to_pt(max(self.crop_mark_offset_mm, self.bleed_mm)),
            fold_marks=getattr(self, "fold_marks", False),
            slug=self.slug,
            scaling=self.scaling,
            gripper_pt=mm_to_pt(gripper_mm),
            on_warning=self.on_warning,
            fold_scheme=scheme.name if scheme else None,
            fold_scheme_implied=implied,
            collation_marks=getattr(self, "collation_marks", False),
            collation_mark_width_pt=mm_to_pt(getattr(self, "collation_mark_width_mm", 0.0)),
            collation_mark_height_pt=mm_to_pt(getattr(self, "collation_mark_height_mm", 0.0)),
            registration_marks=self.registration_marks,
            registration_mark_size_pt=mm_to_pt(self.registration_mark_size_mm),
            colour_bar=self.colour_bar,
            colour_bar_height_pt=mm_to_pt(self.colour_bar_height_mm),
            gang=tuple((entry.page, entry.copies) for entry in gang) if gang else None,
            press=self.press,
            press_max_pt=(mm_to_pt(press.max_sheet_mm[0]), mm_to_pt(press.max_sheet_mm[1])) if press else None,
            press_min_pt=(mm_to_pt(press.min_sheet_mm[0]), mm_to_pt(press.min_sheet_mm[1])) if press else None,
            mark_edges_pt=self._mark_edges_pt(defaults),
            ink_zones=press.ink_zones if press else 0,
            ink_zone_pt=mm_to_pt(press.ink_zone_mm) if press else 0.0,
            face_trim_pt=mm_to_pt(trims_mm[0]),
            head_trim_pt=mm_to_pt(trims_mm[1]),
            foot_trim_pt=mm_to_pt(trims_mm[2]),
            spine_gutter_pt=mm_to_pt(getattr(self, "spine_gutter_mm", 0.0)),
            grind_off_pt=mm_to_pt(getattr(self, "grind_off_mm", 0.0)),
            saddle_lip_pt=mm_to_pt(getattr(self, "saddle_lip_mm", 0.0)),
            rotate_to_fit=self.rotate_to_fit,
            paper_caliper_mm=getattr(self, "paper_caliper_mm", 0.0),
            saddle_max_sheets=defaults.saddle_stitch_max_sheets if self.layout == "saddle_stitch" else 0,
            saddle_max_thickness_mm=defaults.saddle_stitch_max_thickness_mm if self.layout == "saddle_stitch" else 0.0,
            spine_safe_pt=mm_to_pt(getattr(self, "spine_safe_area_mm", 0.0)),
        )

    def _grid_count(self, name: str, default: int) -> int:
        """``columns`` or ``rows`` as the planner takes them: the layout's; for step and repeat 0 when
        left out (the planner chooses the largest grid that fits); ``default`` for a layout without."""
        if self.layout == "step_and_repeat":
            return getattr(self, name) or 0
        return getattr(self, name, default)

    def _mark_edges_pt(self, defaults: ShopDefaults) -> tuple[float, float, float, float]:
        """``(top, right, bottom, left)`` pt: the default non-printing edges that marks keep out of on a
        sheet whose layout names no press (:attr:`Layout.mark_edges_pt`): the gripper unless
        ``gripper_mm`` is given, the tail and the sides unless ``margin_mm`` is given."""
        if self.press is not None:
            return 0.0, 0.0, 0.0, 0.0
        gripper = 0.0 if "gripper_mm" in self.model_fields_set else mm_to_pt(defaults.default_gripper_mm)
        if "margin_mm" in self.model_fields_set:
            return 0.0, 0.0, gripper, 0.0
        tail, side = mm_to_pt(defaults.default_tail_mm), mm_to_pt(defaults.default_side_mm)
        return tail, side, gripper, side


if TYPE_CHECKING:  # a Literal of names listed at run time: mypy types them as strings
    FoldSchemeName = str
    FoldSchemeOrSections = str
else:
    #: A fold scheme of :mod:`imposition.engine.folds` (its names, the one list).
    FoldSchemeName = Literal[FOLD_SCHEME_NAMES]
    #: A booklet's ``fold_scheme``: a scheme, or ``sections`` (nested 2-up sheets folded once).
    FoldSchemeOrSections = Literal[(*FOLD_SCHEME_NAMES, SECTIONS)]


class _Booklet(LayoutSpec):
    """Options of the folded layouts (saddle stitch, perfect bound), duplex.

    ``fold_scheme`` names a sheet of the JDF fold catalogue (:mod:`imposition.engine.folds`): ``F4-1`` (2
    pages a side, one fold), ``F8-7`` (4 a side, two right-angle folds), ``F16-7`` (8 a side, three),
    ``F32-5`` (16 a side, four right-angle folds) or ``F32-9`` (16 a side); each sheet folds into one
    signature, pages whose heads meet across a fold are turned 180°. ``sections`` asks for two pages a
    side, sheets folded once and nested. ``signature_pages`` (4, 8, 16 or 32) without a
    ``fold_scheme`` folds each sheet into a signature of that many pages, by the catalogue scheme of
    :data:`~imposition.engine.folds.SCHEME_FOR_SIGNATURE_PAGES` (F4-1, F8-7, F16-7, F32-5); the planner then
    fails the job (``invalid_layout`` naming ``signature_pages``) when the sheet cannot hold that
    scheme's pages at 100 %, never falling back to 2-up. ``creep_mm`` moves a page toward the spine by
    that much per leaf outside it (per sheet, for nested sheets), at most ``spine_safe_area_mm`` (3 mm:
    the safe area designers keep clear of content inside the trim, 1/8 in; more would move content
    past the trim at the spine: the job fails with ``creep_too_large`` naming the pages and the mm).

    Binder's geometry (millimetres): ``face_trim_mm``, ``head_trim_mm``, ``foot_trim_mm`` are the paper
    the trimmer cuts off beyond each page's trim at that edge; where two pages meet at that edge on
    the sheet (the fold between them is cut away) they lie twice that apart, so the bleed has room.
    Left out, each is ``bleed_mm``: just the room the bleed needs. ``spine_gutter_mm`` is space
    between the trims either side of a spine fold. Bleed is kept on the trimmed edges only: a page's
    spine edge gets none (saddle stitch: the pages meet at the fold) or, perfect bound, up to
    ``grind_off_mm`` (the paper milled off each page's spine edge, so the pages of a spine lie twice
    that apart), and a spine edge is never a ``bleed_reduced`` warning.

    Orientation: the booklet's trim is the size most pages share (ties: the first page's). A page of
    the other orientation is turned 90° by ``rotate_to_fit``: ``ccw``/``cw`` every such page that way,
    ``spine``/``fore_edge`` its head toward that edge of its own leaf (so a landscape page reads with
    the book turned the same way on both sides of a spread only with ``ccw``/``cw``). A page that
    then cannot share the trim (another size, or another orientation under ``rotate_to_fit: none``)
    fails the job with ``trim_size_mismatch`` naming the pages; a larger page of the trim's
    proportions is shrunk to it under ``scaling: fit``.
    """

    duplex: Duplex = "sheetwise"
    binding: Binding = "left_to_right"
    blank_pages_at: BlankPagesAt = "end"
    creep_mm: float = Field(default=0.0, ge=0, le=5, description="shift toward the spine per sheet")
    spine_safe_area_mm: float = Field(default=3.0, ge=0, le=50)
    fold_marks: bool = False
    fold_scheme: FoldSchemeOrSections | None = None
    signature_pages: Literal[4, 8, 16, 32] | None = None
    face_trim_mm: float | None = Field(default=None, ge=0, le=50)
    head_trim_mm: float | None = Field(default=None, ge=0, le=50)
    foot_trim_mm: float | None = Field(default=None, ge=0, le=50)
    spine_gutter_mm: float = Field(default=0.0, ge=0, le=50)

    def trims_mm(self) -> tuple[float, float, float]:
        """``(face, head, foot)`` trims in mm, each ``bleed_mm`` when left out."""
        return tuple(self.bleed_mm if value is None else value  # type: ignore[return-value]
                     for value in (self.face_trim_mm, self.head_trim_mm, self.foot_trim_mm))

    @model_validator(mode="after")
    def _signature_of_the_scheme(self) -> "_Booklet":
        scheme = FOLD_SCHEMES.get(self.fold_scheme or "")
        if scheme is not None and self.signature_pages not in (None, scheme.pages):
            raise ValueError(
                f"signature_pages={self.signature_pages}: fold_scheme {self.fold_scheme!r} folds one sheet into "
                f"{scheme.pages} pages; give signature_pages {scheme.pages} or leave it out"
            )
        if self.layout == "saddle_stitch" and self.fold_scheme == SECTIONS and self.signature_pages not in (None, 4):
            raise ValueError(
                f"signature_pages={self.signature_pages}: saddle stitch with fold_scheme 'sections' nests 2-up sheets "
                f"of 4 pages each; give signature_pages 4, leave it out, or leave out fold_scheme for "
                f"{self.signature_pages}-page sheets"
            )
        return self

    def scheme(self) -> tuple[FoldScheme | None, bool]:
        """The fold scheme of every sheet and whether it was implied by ``signature_pages``:
        ``fold_scheme``'s own; with none named, the catalogue scheme for ``signature_pages``
        (:data:`~imposition.engine.folds.SCHEME_FOR_SIGNATURE_PAGES`); ``(None, False)`` for nested 2-up sheets
        (``fold_scheme: sections``, or neither field given)."""
        if self.fold_scheme == SECTIONS:
            return None, False
        if self.fold_scheme is not None:
            return FOLD_SCHEMES[self.fold_scheme], False
        if self.signature_pages is not None:
            return FOLD_SCHEMES[SCHEME_FOR_SIGNATURE_PAGES[self.signature_pages]], True
        return None, False


class SaddleStitch(_Booklet):
    """A saddle-stitched booklet: sheets nested, folded, stapled through the spine fold.

    Pages are padded with blanks to a multiple of 4 (2-up sheets), or to whole signatures of a fold
    scheme's sheets (``fold_scheme``, or ``signature_pages`` pages a sheet), the outer signature
    carrying the first and the last pages. ``creep_mm`` moves the pages of each inner sheet toward the
    spine by that much more than the sheet outside it (shingling). ``saddle_lip_mm`` makes the
    low-folio half of each sheet (the half with the signature's first page) that much longer, the
    spine moved half of it toward the other half, so the stitcher's opener can catch the lip.

    Binding limits: ``paper_caliper_mm`` is the thickness of one leaf (0.1 mm: 100 g/m² coated paper of
    volume 1.0). A booklet of more sheets than ``settings.saddle_stitch_max_sheets``, or thicker at the
    spine (sheets × 2 leaves × caliper) than ``settings.saddle_stitch_max_thickness_mm``, fails with
    ``binding_limit`` naming the sheets, the thickness and the limit, and advising perfect binding.
    """

    layout: Literal["saddle_stitch"]
    saddle_lip_mm: float = Field(default=0.0, ge=0, le=30)
    paper_caliper_mm: float = Field(default=0.1, gt=0, le=2)

    @model_validator(mode="after")
    def _lip_on_two_columns(self) -> "SaddleStitch":
        scheme, _ = self.scheme()
        if self.saddle_lip_mm and scheme is not None and scheme.columns != 2:
            raise ValueError(
                f"saddle_lip_mm={self.saddle_lip_mm:g}: the lip is the low-folio half of a sheet folded last at "
                f"its spine; fold_scheme {scheme.name!r} has {scheme.columns} columns: give a scheme of 2 columns "
                f"(F4-1, F8-7, sections) or leave saddle_lip_mm out"
            )
        return self


class PerfectBound(_Booklet):
    """A perfect-bound book: folded signatures of ``signature_pages`` gathered in order and glued.

    Each signature is one sheet of a fold scheme (``fold_scheme``, or the catalogue scheme for
    ``signature_pages``: :meth:`_Booklet.scheme`), pages padded with blanks to whole signatures. With
    ``fold_scheme: sections``, or neither field given, a signature is a section of
    ``signature_pages / 4`` nested 2-up sheets folded once (default 16 pages), padded to whole sections
    like the schemes' signatures (``padded_with_blanks`` warns beyond half a signature). Creep applies
    within a signature.
    ``collation_marks`` prints a back-step mark on the spine of each signature
    (``collation_mark_width_mm`` across the spine fold, ``collation_mark_height_mm`` along it), one
    step lower per signature, so that the gathered book shows a staircase (the steps start again at the
    head when they reach the foot). ``grind_off_mm`` is milled off each page's spine edge.
    """

    layout: Literal["perfect_bound"]
    grind_off_mm: float = Field(default=0.0, ge=0, le=10)
    collation_marks: bool = False
    collation_mark_width_mm: float = Field(default=3.0, ge=1, le=10)
    collation_mark_height_mm: float = Field(default=5.0, ge=2, le=30)

    def signature_pages_or_default(self) -> int:
        """Pages per signature: ``signature_pages``, else the fold scheme's, else 16."""
        scheme = FOLD_SCHEMES.get(self.fold_scheme or "")
        return self.signature_pages or (scheme.pages if scheme else 16)


class _Grid(LayoutSpec):
    """Options of the grid layouts: ``gutter_mm`` between cells, duplex style, reading direction."""

    gutter_mm: float = Field(default=0.0, ge=0, le=200)
    column_gutter_mm: float | None = Field(default=None, ge=0, le=200)
    row_gutter_mm: float | None = Field(default=None, ge=0, le=200)
    duplex: Literal["simplex"] | Duplex = "simplex"
    binding: Binding = "left_to_right"

    def gutters_pt(self) -> tuple[float, float]:
        """``(column_gutter_pt, row_gutter_pt)``: space between columns and between rows."""
        column = self.gutter_mm if self.column_gutter_mm is None else self.column_gutter_mm
        row = self.gutter_mm if self.row_gutter_mm is None else self.row_gutter_mm
        return mm_to_pt(column), mm_to_pt(row)


class _Cells(_Grid):
    """A grid of ``columns`` × ``rows`` cells per side."""

    columns: int = Field(default=2, ge=1, le=50)
    rows: int = Field(default=2, ge=1, le=50)


class NUp(_Cells):
    """n-up: pages in reading order, ``columns × rows`` per side (duplex: odd pages front, even back)."""

    layout: Literal["n_up"]


class CutAndStack(_Cells):
    """Cut and stack: after cutting the sheet pile, the stacks laid in cell order read in page order."""

    layout: Literal["cut_and_stack"]


#: Most columns or rows a step-and-repeat layout may fix (``settings.max_cells_per_sheet`` bounds their product).
MAX_GRID_COUNT = 1000
#: Most copies one gang entry may ask for, and most entries of a gang.
MAX_GANG_COPIES = 10_000
MAX_GANG_ENTRIES = 1_000


class GangEntry(_Strict):
    """One page of a gang-up: ``page`` (1-based) and how many ``copies`` of it go on the sheet
    (None: an equal share of the cells the other entries leave, largest count that fits)."""

    page: int = Field(ge=1, le=MAX_PAGE_NUMBER)
    copies: int | None = Field(default=None, ge=1, le=MAX_GANG_COPIES)


class StepAndRepeat(_Grid):
    """Step and repeat: each listed page fills one side with as many identical upright copies as fit.

    ``pages`` are 1-based; None means every page. The grid is the largest that fits at 100 % with room
    for the bleed, marks and slug asked, clear of the gripper and the sheet's non-printing edges (both
    sheet orientations tried under ``orientation: auto``); ``columns`` and ``rows`` fix it (either, or
    both), and then a grid the sheet cannot hold with that room is a ``no_room_for_marks`` warning
    (``scaling: none``) or shrunk pages (``scaling: fit``).
    With a duplex style, consecutive listed pages are front and back of one sheet.

    ``gang`` (instead of ``pages``; simplex only) puts several pages on one sheet: each entry's
    ``copies`` of its ``page`` in cell order, the entries without ``copies`` sharing the cells left
    (the first ones one more when they do not share evenly); more copies than the largest grid holds
    fails with ``invalid_layout`` naming the count and the grid.
    """

    layout: Literal["step_and_repeat"]
    pages: list[Annotated[int, Field(ge=1, le=MAX_PAGE_NUMBER)]] | None = Field(
        default=None, min_length=1, max_length=10_000
    )
    gang: list[GangEntry] | None = Field(default=None, min_length=1, max_length=MAX_GANG_ENTRIES)
    columns: int | None = Field(default=None, ge=1, le=MAX_GRID_COUNT)
    rows: int | None = Field(default=None, ge=1, le=MAX_GRID_COUNT)

    @model_validator(mode="after")
    def _gang_alone(self) -> "StepAndRepeat":
        if self.gang is not None and self.pages is not None:
            raise ValueError("gang and pages: give one of them, not both")
        if self.gang is not None and self.duplex != "simplex":
            raise ValueError(f"gang with duplex={self.duplex!r}: a gang-up is printed on one side (duplex 'simplex')")
        return self


AnyLayout = Annotated[
    Union[SaddleStitch, PerfectBound, NUp, CutAndStack, StepAndRepeat], Field(discriminator="layout")
]
_ADAPTER: TypeAdapter[LayoutSpec] = TypeAdapter(AnyLayout)

#: The accepted values of ``layout``.
LAYOUTS = ("saddle_stitch", "perfect_bound", "n_up", "cut_and_stack", "step_and_repeat")


def _describe(error: Any) -> str:
    """One pydantic error as ``field=value: rule``, the value cut short (pydantic's own message of an
    unknown layout repeats the value whole, so that one is written here)."""
    loc = [clipped(str(part)) for part in error["loc"]]  # an unknown field's name is the tenant's text
    if loc and loc[0] in LAYOUTS:  # the discriminator tag pydantic puts first
        loc = loc[1:]
    if error["type"] == "union_tag_not_found":  # no "layout" key at all
        return f"layout: missing field (required: one of {', '.join(LAYOUTS)})"
    if error["type"] == "union_tag_invalid":
        return f"layout={shown(error['ctx']['tag'])}: unknown layout; layouts: {', '.join(LAYOUTS)}"
    rule = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]  # our own checks
    if not loc and error["type"] == "value_error":  # a check of the whole layout (room on the sheet)
        return clipped(rule, PROBLEM_LIMIT_CHARS)
    value = error.get("input")
    value_part = "" if isinstance(value, dict) else f"={shown(value)}"
    return clipped(f"{'.'.join(loc) or 'layout'}{value_part}: {rule}", PROBLEM_LIMIT_CHARS)


#: pydantic error types saying a value is not of a union member's type (not a limit it broke).
_MISMATCH_TYPES = frozenset({"literal_error", "model_type", "model_attributes_type", "is_instance_of", "enum"})


def _mismatch(error: Any) -> bool:
    return error["type"] in _MISMATCH_TYPES or error["type"].endswith(("_type", "_parsing"))


def _untagged(error: Any, obj: Any) -> tuple[tuple, tuple | None]:
    """``(loc without pydantic's union member tags, the loc of the union field or None)``. A tag is
    a loc part the input has no key for at that point (``margin_mm.constrained-float``,
    ``margin_mm.Margins.top_mm``), unless it is the missing field a ``missing`` error names."""
    parts = list(error["loc"])
    if parts and parts[0] in LAYOUTS:  # the discriminator tag pydantic puts first
        parts = parts[1:]
    kept: list = []
    union_at = None
    value = obj
    for n, part in enumerate(parts):
        if isinstance(value, dict) and part in value or isinstance(value, list) and isinstance(part, int) \
                and 0 <= part < len(value):
            kept.append(part)
            value = value[part]
        elif error["type"] == "missing" and n == len(parts) - 1 or union_at is not None:
            kept.append(part)
        else:
            union_at = tuple(kept)
    return tuple(kept), union_at


def _member_rule(error: Any) -> str:
    """What one union member would take, from its mismatch error: ``a valid number``, ``an object
    of top_mm, right_mm, bottom_mm, left_mm``."""
    if error["type"] == "model_type":
        model = globals().get(str(error.get("ctx", {}).get("class_name", "")))
        if isinstance(model, type) and issubclass(model, BaseModel):
            return f"an object of {', '.join(model.model_fields)}"
    return str(error["msg"]).removeprefix("Input should be ")


def _one_per_union_field(errors: list, obj: Any) -> list:
    """pydantic reports a value that fits no member of a union (``margin_mm``: a number, or
    :class:`Margins`) once per member, under tags of its own. Give each such field its errors in the
    member the value has the type of (``margin_mm=-3``: the number's limit), else one error naming
    what each member would take; every loc without the tags."""
    out: list = []
    unions: dict[tuple, list] = {}
    for error in errors:
        loc, union_at = _untagged(error, obj)
        error = {**error, "loc": loc}
        if union_at is None:
            out.append(error)
        else:
            unions.setdefault(union_at, []).append(error)
    for union_at, found in unions.items():
        limits = [e for e in found if not _mismatch(e) or e["loc"] != union_at]
        if limits:
            out += limits
        else:
            rules = " or ".join(dict.fromkeys(_member_rule(e) for e in found))
            out.append({"type": "union_mismatch", "loc": union_at, "input": found[0].get("input"),
                        "msg": f"Input should be {rules}"})
    return out


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members as a dict (``json.loads``' ``object_pairs_hook``).

    Raises:
        ValueError: a key appears twice (RFC 8259 §4: names SHOULD be unique; a specification that
            says two things at once is refused, not resolved by taking the last).
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {shown(key)} appears more than once in one object")
            seen.add(key)
    return obj


def _nesting_problem(obj: Any) -> str | None:
    """Why ``obj`` nests deeper than :data:`MAX_LAYOUT_NESTING`, or None; walked without recursion."""
    pending = [(obj, 1)]
    while pending:
        value, depth = pending.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else None
        if children is None:
            continue
        if depth > MAX_LAYOUT_NESTING:
            return f"layout nests objects and arrays more than {MAX_LAYOUT_NESTING} deep"
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return None


def parse_layout(obj: dict[str, Any] | str | bytes) -> LayoutSpec:
    """Validate a layout specification.

    Args:
        obj: the specification as a dict, or as JSON text.

    Returns:
        The layout: a :class:`SaddleStitch`, :class:`PerfectBound`, :class:`NUp`,
        :class:`CutAndStack` or :class:`StepAndRepeat` (all :class:`LayoutSpec`).

    Raises:
        InvalidLayout: malformed JSON (a key given twice included), nesting deeper than
            :data:`MAX_LAYOUT_NESTING`, an unknown layout or field, a value of the wrong type or outside
            its limits, or margins and gutters that leave no room on the sheet; the message names the
            bad fields (up to :data:`MAX_PROBLEMS_SHOWN`), their values cut short and the rules they break.
    """
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj, object_pairs_hook=_unique_keys)
        except ValueError as exc:
            raise InvalidLayout(f"layout is not valid JSON: {clipped(str(exc), PROBLEM_LIMIT_CHARS)}") from None
        except RecursionError:  # the decoder recurses once per level of nesting
            raise InvalidLayout(f"layout nests objects and arrays more than {MAX_LAYOUT_NESTING} deep") from None
    if not isinstance(obj, dict):
        raise InvalidLayout(f"layout must be a JSON object, got {type(obj).__name__}")
    nesting = _nesting_problem(obj)
    if nesting is not None:
        raise InvalidLayout(nesting)
    try:
        return _ADAPTER.validate_python(obj)
    except pydantic.ValidationError as exc:
        errors = _one_per_union_field(exc.errors(include_url=False), obj)
        problems = [_describe(error) for error in errors[:MAX_PROBLEMS_SHOWN]]
        if len(errors) > MAX_PROBLEMS_SHOWN:
            problems.append(f"and {len(errors) - MAX_PROBLEMS_SHOWN} more problems")
        raise InvalidLayout(f"invalid layout: {'; '.join(problems)}") from None
