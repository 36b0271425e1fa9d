"""Press-sheet presets, unit conversion and the tolerance of lengths.

Sizes are stored portrait (width ≤ height) in millimetres, as the standards give them; the layout's
``orientation`` turns them. Sources: ISO 216 (A series, B series), ISO 217 (SRA series), ANSI/ASME
Y14.1 and the US paper sizes (Letter, Legal, Tabloid, 12 × 18 in).
"""

from __future__ import annotations

#: PDF points per millimetre (1 pt = 1/72 in, 1 in = 25.4 mm; PDF 32000-1 §8.3.2.3).
PT_PER_MM = 72.0 / 25.4
#: Millimetres per inch.
MM_PER_INCH = 25.4
#: Two lengths closer than this (pt) are equal: absorbs the rounding of boxes written with 4 decimals.
EPSILON_PT = 0.05

#: Sheet presets: name (case-insensitive) → (width_mm, height_mm), portrait.
SHEET_PRESETS_MM: dict[str, tuple[float, float]] = {
    "A0": (841.0, 1189.0),
    "A1": (594.0, 841.0),
    "A2": (420.0, 594.0),
    "A3": (297.0, 420.0),
    "A4": (210.0, 297.0),
    "A5": (148.0, 210.0),
    "SRA2": (450.0, 640.0),
    "SRA3": (320.0, 450.0),
    "B1": (707.0, 1000.0),
    "B2": (500.0, 707.0),
    "LETTER": (8.5 * MM_PER_INCH, 11.0 * MM_PER_INCH),
    "LEGAL": (8.5 * MM_PER_INCH, 14.0 * MM_PER_INCH),
    "TABLOID": (11.0 * MM_PER_INCH, 17.0 * MM_PER_INCH),
    "12X18": (12.0 * MM_PER_INCH, 18.0 * MM_PER_INCH),
}

#: Other spellings accepted for a preset.
SHEET_ALIASES: dict[str, str] = {
    "12X18IN": "12X18",
    "12X18 IN": "12X18",
    "12 X 18 IN": "12X18",
    "LEDGER": "TABLOID",
    "US LETTER": "LETTER",
    "US LEGAL": "LEGAL",
}


def mm_to_pt(length_mm: float) -> float:
    """Millimetres to PDF points."""
    return length_mm * PT_PER_MM


def pt_to_mm(length_pt: float) -> float:
    """PDF points to millimetres."""
    return length_pt / PT_PER_MM


def preset_size_mm(name: str) -> tuple[float, float] | None:
    """The portrait size ``(width_mm, height_mm)`` of a preset, or None if the name is unknown.

    Names are case-insensitive; ``"12x18 in"``, ``"12x18in"`` and ``"12x18"`` are the same sheet.
    """
    key = " ".join(name.strip().upper().split())
    key = SHEET_ALIASES.get(key, key)
    return SHEET_PRESETS_MM.get(key)


def preset_names() -> list[str]:
    """The preset names, as listed in error messages."""
    return ["A0", "A1", "A2", "A3", "A4", "A5", "SRA2", "SRA3", "B1", "B2",
            "Letter", "Legal", "Tabloid", "12x18 in"]
