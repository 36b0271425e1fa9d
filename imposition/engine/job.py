"""The plain data of one imposition that crosses into the engine's child process.

:class:`Layout` is a validated :class:`~imposition.engine.spec.LayoutSpec` resolved into the planner's terms
(lengths in points, defaults filled in, the layout's kind as a string); :class:`SlugInfo` names the
job and tenant; :class:`ContentBudget` bounds what the input's streams may decode to. All are frozen dataclasses that travel as JSON, and this module imports neither
pydantic nor pikepdf, so the parent (which validates with pydantic) and the child (which plans and
draws with pikepdf) share them without paying for the other side's imports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from .sheets import EPSILON_PT, pt_to_mm

#: Layout kinds (the ``layout`` field of a specification).
SADDLE_STITCH = "saddle_stitch"
PERFECT_BOUND = "perfect_bound"
N_UP = "n_up"
CUT_AND_STACK = "cut_and_stack"
STEP_AND_REPEAT = "step_and_repeat"
#: The folded layouts: two pages per side against the spine, creep and fold marks.
BOOKLETS = (SADDLE_STITCH, PERFECT_BOUND)
#: Where padding blanks go in a booklet: at the end, at the start, or before the last page (so the
#: last page stays the back cover).
BlankPagesAt = Literal["end", "start", "before_back_cover"]


@dataclass(frozen=True)
class SlugInfo:
    """Who a plate belongs to, printed on its slug line.

    Attributes:
        job_id: the job's id.
        tenant_id: the tenant's canonical id.
        date: the date printed on the slug, ISO 8601 (``2024-05-31``); the service gives the job's
            submission date, so every attempt of a job writes the same bytes. None: no date.
    """

    job_id: str
    tenant_id: str
    date: str | None = None


@dataclass(frozen=True)
class ContentBudget:
    """The limits, as the settings of the same names (``imposition.common.settings.Settings``).

    Attributes:
        max_decoded_bytes_per_stream: most bytes one stream (a page's content: all its streams
            together) may decode to.
        max_decoded_bytes_per_job: most bytes all counted streams of the input may decode to.
        max_content_operators_per_stream: most operators one content stream may hold.
        max_content_operators_per_job: most operators all content streams of the input may hold.
    """

    max_decoded_bytes_per_stream: int
    max_decoded_bytes_per_job: int
    max_content_operators_per_stream: int
    max_content_operators_per_job: int

    @classmethod
    def of(cls, settings: object) -> "ContentBudget":
        """The budget of ``settings`` (any object with the four attributes)."""
        return cls(**{field.name: getattr(settings, field.name) for field in fields(cls)})

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, int]) -> "ContentBudget":
        return cls(**{field.name: int(data[field.name]) for field in fields(cls)})


@dataclass(frozen=True)
class ShopDefaults:
    """What the shop's settings add to every layout (``imposition.common.settings.Settings``, the fields
    of the same names): the sheet's non-printing edges when a layout names no press, and the binder's
    limits of a saddle stitch. Lengths in mm."""

    default_gripper_mm: float = 10.0
    default_tail_mm: float = 5.0
    default_side_mm: float = 5.0
    saddle_stitch_max_sheets: int = 30
    saddle_stitch_max_thickness_mm: float = 6.0

    @classmethod
    def of(cls, settings: object) -> "ShopDefaults":
        """The defaults of ``settings`` (any object with the five attributes)."""
        return cls(**{field.name: getattr(settings, field.name) for field in fields(cls)})


@dataclass(frozen=True)
class Layout:
    """A validated layout in the planner's terms (built by :meth:`imposition.engine.spec.LayoutSpec.resolved`).

    Lengths are PDF points; the field meanings are those of :mod:`imposition.engine.spec`.

    Attributes:
        kind: the layout (``saddle_stitch``, ``perfect_bound``, ``n_up``, ``cut_and_stack``,
            ``step_and_repeat``).
        sheet_size_pt: ``(width_pt, height_pt)`` of the sheet as named, before the orientation.
        orientation: ``auto``, ``portrait`` or ``landscape``.
        margins_pt: ``(top, right, bottom, left)`` on the front side.
        gripper_pt: the press's gripper strip at the lead edge (the foot of the front), kept clear.
        margin_given: ``margin_mm`` as the specification gave it (for error messages).
        gutters_pt: ``(between columns, between rows)``; zero for the folded layouts.
        columns, rows: the grid of one side (booklets 2 × 1, or their fold scheme's; step and repeat:
            the layout's, or 0 where it leaves the planner to choose the largest that fits).
        duplex: ``simplex``, ``sheetwise``, ``work_and_turn`` or ``work_and_tumble``.
        binding: ``left_to_right`` or ``right_to_left``.
        blank_pages_at: where a booklet's padding blanks go (``end``, ``start``, ``before_back_cover``).
        creep_pt: shift toward the spine per sheet (booklets).
        signature_pages: pages per signature (perfect bound; 0 otherwise).
        pages: the listed 1-based pages of a step-and-repeat job, or None for every page.
        bleed_pt: bleed kept around each trim, at most.
        crop_marks: draw crop marks.
        crop_mark_length_pt: length of a mark.
        crop_mark_offset_pt: gap from the trim corner to a mark (already at least ``bleed_pt``).
        fold_marks: draw fold marks (booklets).
        slug: print the slug line.
        scaling: ``fit`` (shrink to the cell) or ``none`` (100 % or ``page_too_large``).
        on_warning: ``warn`` (warnings go into the report) or ``fail`` (the first one fails the job).
        fold_scheme: the JDF fold catalogue name of a booklet's sheet (:mod:`imposition.engine.folds`), or
            None for sections of 2-up sheets folded once and nested.
        fold_scheme_implied: ``fold_scheme`` was chosen for ``signature_pages`` (the layout named no
            scheme): the planner fails the job when the sheet cannot hold its pages at 100 %.
        collation_marks: back-step marks on each signature's spine (perfect bound).
        collation_mark_width_pt, collation_mark_height_pt: size of one collation mark.
        registration_marks: registration targets at the middle of each edge of the block.
        registration_mark_size_pt: diameter of a registration target.
        colour_bar: a CMYK colour bar across the head of the plate.
        colour_bar_height_pt: height (and width) of one patch of the colour bar.
        gang: step and repeat of several pages on one sheet: ``((page, copies or None), …)`` with
            1-based pages; None for one page a side.
        press: the press preset named (:mod:`imposition.engine.presses`), or None.
        press_max_pt, press_min_pt: ``(across, around)`` sheet limits of the press: a plate is
            ``across`` wide (the gripper edge, its foot) and ``around`` high; None without a press.
        mark_edges_pt: ``(top, right, bottom, left)``: strips at the sheet's edges (as the front is
            seen) that marks keep out of although pages may use them: the default non-printing edges
            of a sheet whose layout names no press (:class:`ShopDefaults`): the gripper at the foot
            unless ``gripper_mm`` is given (work and tumble: head and foot), the tail at the head and
            the sides unless ``margin_mm`` is given; 0 where the layout or its press set the edge, the
            printable area then keeping everything out.
        ink_zones, ink_zone_pt: the press's ink zones across the sheet; the colour bar carries a solid
            patch of each process ink in every zone (0: a bar of square patches over the block).
        face_trim_pt, head_trim_pt, foot_trim_pt: paper cut off beyond the trim at each edge of a
            booklet's page; where two pages meet at that edge on the sheet the gap is twice this.
        spine_gutter_pt: space between the trims of the two pages either side of a spine fold.
        grind_off_pt: perfect binding: paper milled off the spine edge of each page (gap twice this).
        saddle_lip_pt: saddle stitch: the low-folio half of each sheet this much longer (the lip).
        rotate_to_fit: ``none``, ``ccw``, ``cw``, ``spine`` or ``fore_edge``: how a page whose
            orientation differs from its cell's (booklets: from the booklet's trim) is turned 90°.
        paper_caliper_mm: the thickness of one leaf of the paper (saddle stitch; 0 otherwise).
        saddle_max_sheets, saddle_max_thickness_mm: a saddle stitch's binding limits
            (:class:`ShopDefaults`); 0: none.
        spine_safe_pt: booklets: the strip along a page's spine edge its content keeps clear of; creep
            may move a page's content toward the spine by at most this much (0: no creep allowed).
    """

    kind: str
    sheet_size_pt: tuple[float, float]
    orientation: str
    margins_pt: tuple[float, float, float, float]
    margin_given: str
    gutters_pt: tuple[float, float]
    columns: int
    rows: int
    duplex: str
    binding: str
    blank_pages_at: BlankPagesAt
    creep_pt: float
    signature_pages: int
    pages: tuple[int, ...] | None
    bleed_pt: float
    crop_marks: bool
    crop_mark_length_pt: float
    crop_mark_offset_pt: float
    fold_marks: bool
    slug: bool
    scaling: str
    gripper_pt: float = 0.0
    on_warning: str = "warn"
    fold_scheme: str | None = None
    fold_scheme_implied: bool = False
    collation_marks: bool = False
    collation_mark_width_pt: float = 0.0
    collation_mark_height_pt: float = 0.0
    registration_marks: bool = False
    registration_mark_size_pt: float = 0.0
    colour_bar: bool = False
    colour_bar_height_pt: float = 0.0
    gang: tuple[tuple[int, int | None], ...] | None = None
    press: str | None = None
    press_max_pt: tuple[float, float] | None = None
    press_min_pt: tuple[float, float] | None = None
    mark_edges_pt: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    ink_zones: int = 0
    ink_zone_pt: float = 0.0
    face_trim_pt: float = 0.0
    head_trim_pt: float = 0.0
    foot_trim_pt: float = 0.0
    spine_gutter_pt: float = 0.0
    grind_off_pt: float = 0.0
    saddle_lip_pt: float = 0.0
    rotate_to_fit: str = "none"
    paper_caliper_mm: float = 0.0
    saddle_max_sheets: int = 0
    saddle_max_thickness_mm: float = 0.0
    spine_safe_pt: float = 0.0

    @property
    def booklet(self) -> bool:
        """True for the folded layouts (saddle stitch, perfect bound)."""
        return self.kind in BOOKLETS

    def sheet_sizes_pt(self) -> list[tuple[float, float]]:
        """The sheet ``(width_pt, height_pt)`` in each orientation the layout allows, portrait first
        (``auto``: portrait and landscape)."""
        short, long_ = sorted(self.sheet_size_pt)
        portrait, landscape = (short, long_), (long_, short)
        sizes = {"portrait": [portrait], "landscape": [landscape]}.get(self.orientation, [portrait, landscape])
        return [size for size in sizes if self.press_feeds(size)] or sizes

    def press_feeds(self, size_pt: tuple[float, float]) -> bool:
        """True when the press (if any) feeds a plate of ``size_pt`` ``(width, height)`` as drawn: its
        width across the press (the gripper edge at its foot), its height around the cylinder."""
        if self.press_max_pt is None or self.press_min_pt is None:
            return True
        (width, height), (max_w, max_h), (min_w, min_h) = size_pt, self.press_max_pt, self.press_min_pt
        return min_w - EPSILON_PT <= width <= max_w + EPSILON_PT and min_h - EPSILON_PT <= height <= max_h + EPSILON_PT

    def printable_pt(self, width_pt: float, height_pt: float) -> tuple[float, float, float, float]:
        """The part of a ``width_pt`` × ``height_pt`` sheet that may carry ink, ``(x0, y0, x1, y1)``:
        the sheet less the margins and the gripper (at the foot of the front).

        Both sides of a sheet printed from one plate must register, so the plate is symmetric where
        the sheet turns: work and turn (turned side to side) keeps the larger of the left and right
        margins on both; work and tumble (turned head to foot, gripped by the other edge for the
        back) keeps the larger of the head and foot margins (gripper included) on both.
        """
        top, right, bottom, left = self.margins_pt
        bottom += self.gripper_pt
        if self.duplex == "work_and_turn":
            left = right = max(left, right)
        if self.duplex == "work_and_tumble":
            top = bottom = max(top, bottom)
        return left, bottom, width_pt - right, height_pt - top

    def mark_area_pt(self, width_pt: float, height_pt: float) -> tuple[float, float, float, float]:
        """The part of the printable area (:meth:`printable_pt`) that marks may use, ``(x0, y0, x1, y1)``:
        clear of :attr:`mark_edges_pt` (work and tumble: the larger of head and foot on both, as the
        back is gripped by the head)."""
        x0, y0, x1, y1 = self.printable_pt(width_pt, height_pt)
        top, right, bottom, left = self.mark_edges_pt
        if self.duplex == "work_and_tumble":
            top = bottom = max(top, bottom)
        x0, y0 = max(x0, left), max(y0, bottom)
        return x0, y0, max(x0, min(x1, width_pt - right)), max(y0, min(y1, height_pt - top))

    def side_regions_pt(self, width_pt: float, height_pt: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The front's and the back's regions of the printable area, each ``(x0, y0, x1, y1)``.

        The back's region is the front's seen through the turn, so whatever lies at a place of the
        front's region backs onto the same place of the back's: mirrored across the sheet's vertical
        centre line (sheetwise, work and turn: the sheet turned side to side) or across its horizontal
        centre line (work and tumble, the back then turned 180°). Work and turn puts the front in the
        left half, work and tumble in the upper half; simplex and sheetwise use the whole area.
        """
        x0, y0, x1, y1 = self.printable_pt(width_pt, height_pt)
        if self.duplex == "work_and_tumble":
            front = (x0, height_pt / 2, x1, y1)
            return front, (x0, height_pt - front[3], x1, height_pt - front[1])
        front = (x0, y0, width_pt / 2, y1) if self.duplex == "work_and_turn" else (x0, y0, x1, y1)
        return front, (width_pt - front[2], y0, width_pt - front[0], y1)

    def room_problem(self, width_pt: float, height_pt: float) -> str | None:
        """Why this layout cannot fit a ``width_pt`` × ``height_pt`` sheet whatever the pages, or None.

        Only what depends on no PDF is checked: the margins and gripper must leave room, and the
        gutters of the given grid (one cell for step and repeat) must leave room for cells on one
        side's region (:meth:`side_regions_pt`).

        Returns:
            A message naming the fields, their values and the sheet size (mm), or None when it fits.
        """
        sheet = f"the {pt_to_mm(width_pt):.0f} × {pt_to_mm(height_pt):.0f} mm sheet"
        front = self.side_regions_pt(width_pt, height_pt)[0]
        region_w, region_h = front[2] - front[0], front[3] - front[1]
        if region_w <= EPSILON_PT or region_h <= EPSILON_PT:
            gripper = f" and gripper_mm={pt_to_mm(self.gripper_pt):g}" if self.gripper_pt else ""
            return f"margin_mm={self.margin_given}{gripper}: leaves no room on {sheet}"
        columns, rows = (self.columns or 1, self.rows or 1)  # step and repeat: 0 when computed
        for count, name, gutter_pt, room_pt, across in (
            (columns, "columns", self.gutters_pt[0], region_w, "width"),
            (rows, "rows", self.gutters_pt[1], region_h, "height"),
        ):
            if room_pt - (count - 1) * gutter_pt <= 0:
                return (
                    f"{name}={count} with {pt_to_mm(gutter_pt):g} mm gutters between them (gutter_mm or "
                    f"{name[:-1]}_gutter_mm) leave no room for cells in the {pt_to_mm(room_pt):.1f} mm "
                    f"usable {across} of a side on {sheet}"
                )
        return None

    def to_json(self) -> dict[str, Any]:
        """The layout as a JSON object (tuples become arrays)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Layout":
        """The layout from :meth:`to_json`'s object (arrays back to tuples).

        Raises:
            TypeError: a field is missing or unknown (the dataclass constructor's own check).
        """
        return cls(**{name: _tuples(value) for name, value in data.items()})


def _tuples(value: Any) -> Any:
    """``value`` with every JSON array, at any depth, turned back into a tuple."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value
