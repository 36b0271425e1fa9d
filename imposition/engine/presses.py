"""Press presets: the sheet, gripper, side lay, margins and ink zones of a sheet-fed offset press.

A layout names one with ``"press": "sm52"``; :mod:`imposition.engine.spec` fills in what the layout
leaves out (sheet, orientation, ``gripper_mm``, ``margin_mm``) and refuses a sheet the press cannot
feed. Sizes are as the press's maker states them, ``across`` the press (along the gripper edge, the
plate's width as drawn, the gripper at the foot of the front) by ``around`` the cylinder (the plate's
height). The colour bar of a press job runs across the whole printable width with one solid patch of
each process ink in every ink zone, the zones centred on the sheet's centre line as the press centres
the sheet.

Sources: the largest sheets are the formats Heidelberg names the Speedmaster SM 52, SM 74 and SM 102
by (37 × 52, 53 × 74, 72 × 102 cm). The smallest sheets, the gripper, side and tail margins and the
ink zones are the usual values for these presses, not read from a maker's data sheet; a shop whose
press differs (another gripper bar, another zone width) names its own ``gripper_mm`` and
``margin_mm``, or corrects the preset here: every figure of a press lives in this table only.
(docs/engine.md, "Press presets".) A layout naming no press gets the default non-printing edges of
the settings (``default_gripper_mm``, ``default_tail_mm``, ``default_side_mm``) for its marks.
"""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Press:
    """One press preset (lengths in mm).

    Attributes:
        name: the preset's name in a layout (``sm52``).
        model: the press's name as its maker gives it.
        max_sheet_mm: ``(across, around)``: the largest sheet the press feeds.
        min_sheet_mm: ``(across, around)``: the smallest sheet.
        gripper_mm: the unprintable strip at the lead edge, where the grippers hold the sheet.
        side_lay_mm: the unprintable margin on each side edge (the side lay's, and the other's).
        tail_mm: the unprintable margin at the trailing edge (the head of the front).
        ink_zones: ink zones across the press.
        ink_zone_mm: width of one ink zone.
    """

    name: str
    model: str
    max_sheet_mm: tuple[float, float]
    min_sheet_mm: tuple[float, float]
    gripper_mm: float
    side_lay_mm: float
    tail_mm: float
    ink_zones: int
    ink_zone_mm: float

    def describe(self) -> str:
        """``sm52 (Heidelberg Speedmaster SM 52: 520 × 370 mm at most, across × around)``."""
        across, around = self.max_sheet_mm
        return f"{self.name} ({self.model}: {across:g} × {around:g} mm at most, across × around)"


#: The presets, by name.
PRESSES: dict[str, Press] = {press.name: press for press in (
    # A3+ press: SRA3 long edge first
    Press("sm52", "Heidelberg Speedmaster SM 52", (520.0, 370.0), (145.0, 105.0),
          gripper_mm=10.0, side_lay_mm=5.0, tail_mm=3.0, ink_zones=23, ink_zone_mm=520.0 / 23),
    # B2 press (SRA2 long edge first)
    Press("sm74", "Heidelberg Speedmaster SM 74", (740.0, 530.0), (280.0, 210.0),
          gripper_mm=10.0, side_lay_mm=5.0, tail_mm=3.0, ink_zones=23, ink_zone_mm=32.5),
    # B1 press (SRA1 long edge first)
    Press("sm102", "Heidelberg Speedmaster SM 102", (1020.0, 720.0), (480.0, 340.0),
          gripper_mm=10.0, side_lay_mm=5.0, tail_mm=3.0, ink_zones=32, ink_zone_mm=32.5),
)}
#: The accepted values of a layout's ``press``.
PRESS_NAMES = tuple(PRESSES)
