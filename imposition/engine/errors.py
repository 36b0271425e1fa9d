"""Errors of the imposition engines: one root, every leaf typed with its ``code``::

    ImpositionError
    ├── InputError: bad input, the tenant must fix the file or the layout (never retried)
    │   ├── NotAPdf not_a_pdf · NoPages no_pages · PasswordRequired password_required
    │   ├── DamagedPdf damaged · PageTooLarge page_too_large · InvalidLayout invalid_layout
    │   │   · TrimSizeMismatch trim_size_mismatch · BindingLimitExceeded binding_limit · CreepTooLarge creep_too_large
    │   └── Departure: a warning made a failure by the layout's ``on_warning: fail``
    │       └── Repaired repaired · ScaledToFit scaled_to_fit · NoRoomForMarks no_room_for_marks
    │           · BleedReduced bleed_reduced · NoRoomForSlug no_room_for_slug
    │           · TrimBoxReplaced trim_box_replaced · TrimBoxClipped trim_box_clipped
    │           · PreflightErrors preflight_errors · FixupFailed fixup_failed · PaddedWithBlanks padded_with_blanks
    ├── LimitExceeded: the job breaks a limit of the service (never retried)
    │   └── InputTooLarge input_too_large · TooManyPages too_many_pages · TooManyCells too_many_cells
    │       · TimeLimitExceeded time_limit · MemoryLimitExceeded memory_limit · ContentTooLarge content_too_large
    ├── EngineCancelled cancelled: the caller asked the engine to stop (not retried)
    ├── Notice: reported beside the warnings, never a failed job (not even with ``on_warning: fail``)
    │   └── PreviewFailed preview_failed · PagesTurned pages_turned
    └── EngineFailure: the engine itself failed
        ├── retryable: EngineCrashed engine_crashed · EngineAborted engine_aborted · OutputNotSaved output_not_saved
        └── EngineUnavailable (a ConnectionError: retried, no attempt charged): the node's, not the job's
            └── LicenceUnavailable licence · EngineConfigurationError engine_config

``retryable`` and ``code`` are class attributes; :func:`error_from_code` rebuilds a child's error,
:func:`departure_error` a :class:`PlateWarning`'s (never a notice's). Why: docs/design.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


class ImpositionError(Exception):
    """Root of every error raised by :mod:`imposition`.

    Attributes:
        code: short machine code of the error class (stable; recorded in the job item).
        retryable: True only when running the same job again may succeed.
        message: the human-readable message (also ``str(error)``).
    """

    code: str = "imposition_error"
    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InputError(ImpositionError):
    """The input PDF or the layout is unusable; the tenant must fix it."""

    code = "bad_input"


class NotAPdf(InputError):
    """The file has no ``%PDF-`` header in its first 1024 bytes (PDF 32000-1 §7.5.2)."""

    code = "not_a_pdf"


class NoPages(InputError):
    """The PDF opens but its page tree holds no page."""

    code = "no_pages"


class PasswordRequired(InputError):
    """The PDF is encrypted with a user password; it cannot be opened without it.

    A PDF with only an owner password (permissions) opens and imposes normally.
    """

    code = "password_required"


class DamagedPdf(InputError):
    """The PDF is damaged beyond what qpdf's reconstruction can repair."""

    code = "damaged"


class PageTooLarge(InputError):
    """Pages do not fit their cell on the sheet and the layout does not ask to shrink them (``scaling:
    none``, the default): the message names the pages, the cell and the scale ``scaling: fit`` would
    give them."""

    code = "page_too_large"


class InvalidLayout(InputError):
    """The layout specification is malformed or breaks a limit (the message names field and value)."""

    code = "invalid_layout"


class TrimSizeMismatch(InputError):
    """A booklet's pages cannot share one trim size (another size, or another orientation that the
    layout's ``rotate_to_fit`` does not turn): the message names the pages, their sizes and the trim."""

    code = "trim_size_mismatch"


class BindingLimitExceeded(InputError):
    """A saddle stitch past what a stitcher binds: more nested sheets than
    ``settings.saddle_stitch_max_sheets``, or thicker at the spine (sheets × 2 leaves ×
    ``paper_caliper_mm``) than ``settings.saddle_stitch_max_thickness_mm``; the message names the
    sheets, the thickness and the limit, and advises perfect binding."""

    code = "binding_limit"


class CreepTooLarge(InputError):
    """``creep_mm`` would move pages' content toward the spine by more than ``spine_safe_area_mm``,
    past the trim at the spine; the message names the pages and the millimetres."""

    code = "creep_too_large"


class Departure(InputError):
    """The plate would depart from what the layout asked, and the layout says ``on_warning: fail``."""

    code = "departure"


class Repaired(Departure):
    """The file was damaged (qpdf rebuilt its cross-reference table or recovered objects), yet every
    page's content and resources read whole."""

    code = "repaired"


class ScaledToFit(Departure):
    """Pages were shrunk to fit their cells (``scaling: fit``); the message names the pages and the scale."""

    code = "scaled_to_fit"


class NoRoomForMarks(Departure):
    """Crop or fold marks could not be drawn whole: the message names the edge and the missing millimetres."""

    code = "no_room_for_marks"


class BleedReduced(Departure):
    """Less bleed was kept than ``bleed_mm`` asked (the page has less, or the gutter or sheet leaves less)."""

    code = "bleed_reduced"


class NoRoomForSlug(Departure):
    """The slug line was asked for but no strip outside every trim, bleed and mark could hold it."""

    code = "no_room_for_slug"


class TrimBoxReplaced(Departure):
    """Pages whose TrimBox lies outside their MediaBox (or CropBox) were imposed on their CropBox, or
    their MediaBox when they have no CropBox, as preflight tools fall back; the message names the
    file and every such page."""

    code = "trim_box_replaced"


class TrimBoxClipped(Departure):
    """Pages whose TrimBox lies partly outside their MediaBox (or CropBox), or encloses it, were imposed
    on the part inside: a trim smaller than the one the file states; the message names the file, the
    pages and the trim they have."""

    code = "trim_box_clipped"


class PreflightErrors(Departure):
    """pdfToolbox's process plan found hits of error severity (its exit code 3 or 8); the message
    gives the exit code and the end of its log."""

    code = "preflight_errors"


class FixupFailed(Departure):
    """A fixup of pdfToolbox's process plan failed (its exit code 8); the plate was still written."""

    code = "fixup_failed"


class PaddedWithBlanks(Departure):
    """A booklet was padded to whole signatures with more blank pages than half a signature."""

    code = "padded_with_blanks"


@dataclass(frozen=True)
class PlateWarning:
    """A typed warning: the plate departs from what the layout asked, and says how.

    Attributes:
        code: the code of its :class:`Departure` class (``scaled_to_fit``, ``no_room_for_marks``, …).
        message: names the field, the value asked and what the plate has (mm, %).
    """

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        """``{"code": ..., "message": ...}``."""
        return {"code": self.code, "message": self.message}


def departure_error(warnings: Iterable[PlateWarning]) -> Departure | None:
    """The error ``on_warning: fail`` raises for ``warnings``: the first departure's class, every
    departure's message joined; None when there is none (notices, :func:`is_notice`, never count)."""
    warnings = [warning for warning in warnings if not is_notice(warning.code)]
    if not warnings:
        return None
    cls = ERRORS_BY_CODE.get(warnings[0].code, Departure)
    assert issubclass(cls, Departure)
    return cls(f"on_warning=fail: {'; '.join(f'{w.code}: {w.message}' for w in warnings)}")


class LimitExceeded(ImpositionError):
    """The job breaks a limit of the service (settings ``max_*`` and ``engine_*_limit_*``)."""

    code = "limit"


class InputTooLarge(LimitExceeded):
    """The input file is larger than ``settings.max_input_bytes``."""

    code = "input_too_large"


class TooManyPages(LimitExceeded):
    """The input has more pages than ``settings.max_pages``."""

    code = "too_many_pages"


class TooManyCells(LimitExceeded):
    """A sheet side would hold more cells than ``settings.max_cells_per_sheet`` (step and repeat of a
    tiny page), or the job more than ``settings.max_cells_per_job``; refused before the cells are laid
    out."""

    code = "too_many_cells"


class TimeLimitExceeded(LimitExceeded):
    """The engine ran past its wall-clock limit and was killed (with its whole process group)."""

    code = "time_limit"


class MemoryLimitExceeded(LimitExceeded):
    """The engine needed more than ``settings.engine_memory_limit_bytes`` of address space."""

    code = "memory_limit"


class ContentTooLarge(LimitExceeded):
    """The input's streams decode to more bytes, or its content holds more operators, than the content
    budget allows (``settings.max_decoded_bytes_per_stream``, ``max_decoded_bytes_per_job``,
    ``max_content_operators_per_stream``, ``max_content_operators_per_job``), or a stream uses a filter
    whose output cannot be bounded; found while decoding, before anything is drawn
    (:mod:`imposition.engine.budget`)."""

    code = "content_too_large"


class EngineCancelled(ImpositionError):
    """The caller set the cancel event (for example, the worker lost its lease); the engine stopped.

    Not a failure of the job: whoever holds the lease now runs it. Never retried in place.
    """

    code = "cancelled"


class Notice(ImpositionError):
    """Something the tenant should know that is not a departure from the layout: reported with the
    warnings (a :class:`PlateWarning` of its code), never a failed job, whatever ``on_warning`` says."""

    code = "notice"


class PreviewFailed(Notice):
    """The plate's previews could not be rendered (pdfium refused it, or the preview ran out of its
    time or memory). Never fails a job: the engine reports it as a ``preview_failed`` warning."""

    code = "preview_failed"


class PagesTurned(Notice):
    """``rotate_to_fit`` turned pages 90°, as the layout asked: the notice names them and the turn."""

    code = "pages_turned"


class EngineFailure(ImpositionError):
    """The engine itself failed, not the input."""

    code = "engine_failure"


class EngineCrashed(EngineFailure):
    """The engine's child process died for a reason it did not report (a signal, a crash)."""

    code = "engine_crashed"
    retryable = True


class EngineUnavailable(EngineFailure, ConnectionError):
    """This node's engine cannot run any job now: its licence or its installation failed, not the job.

    Retried without charging an attempt (it is a :class:`ConnectionError`, which the task layer counts
    as the infrastructure's, up to ``Settings.infra_retry_limit`` times); the node's engine check
    (:func:`imposition.engine.backends.pdftoolbox.check_engine`) keeps the node from taking jobs until
    it passes again.
    """

    code = "engine_unavailable"
    retryable = True


class LicenceUnavailable(EngineUnavailable):
    """pdfToolbox found no licence (exit code 100: "not serialized"), or none within
    ``Settings.pdftoolbox_licence_wait_s`` from its licence servers: a licence outage, not the job."""

    code = "licence"


class EngineAborted(EngineFailure):
    """pdfToolbox aborted or ran out of memory (exit codes 130, 134)."""

    code = "engine_aborted"
    retryable = True


class OutputNotSaved(EngineFailure):
    """The engine could not save the plate file (pdfToolbox exit code 106), for example a full disk."""

    code = "output_not_saved"
    retryable = True


class EngineConfigurationError(EngineUnavailable):
    """The engine is installed or configured wrongly on this node: the executable is missing or cannot
    run (exit code 127), the process plan is missing, or pdfToolbox refused its command line (101
    parameter error, 102 syntax error) or could not open a file other than the input the engine had
    just read (104). Not the job's fault: retried (elsewhere), not charged."""

    code = "engine_config"


#: Longest echo of a value in an error message (characters, ellipsis included).
ECHO_LIMIT_CHARS = 80


def shown(value: object, limit_chars: int = ECHO_LIMIT_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit_chars`` characters with a trailing ``…``.

    A value a tenant sent can be megabytes long; its message must not be. A value ``repr`` refuses
    (an integer past CPython's 4300-digit limit, a structure nested too deep) is named by its type.
    """
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__} too large to show>"
    return clipped(text, limit_chars)


def clipped(text: str, limit_chars: int = ECHO_LIMIT_CHARS) -> str:
    """``text`` cut to ``limit_chars`` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit_chars else text[: limit_chars - 1] + "…"


def page_ranges(numbers: Iterable[int]) -> str:
    """``1–3, 7`` for the numbers 1, 2, 3 and 7 (sorted, duplicates once): page or plate lists in messages."""
    runs: list[tuple[int, int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def without_paths(text: str, paths: Iterable[Path]) -> str:
    """``text`` with each of ``paths`` written as its bare name (qpdf and pdfToolbox name the files
    they read and write by their full path, a path of the worker's that a tenant should not see). Only
    paths with a directory part are replaced."""
    named = {str(path) for path in paths}
    for path in sorted((path for path in named if "/" in path), key=len, reverse=True):  # children first
        text = text.replace(path, Path(path).name)
    return text


def _all_error_classes(root: type[ImpositionError] = ImpositionError) -> list[type[ImpositionError]]:
    classes = [root]
    for sub in root.__subclasses__():
        classes.extend(_all_error_classes(sub))
    return classes


#: Every error class by its ``code`` (used to rebuild an error reported by a child process).
ERRORS_BY_CODE: dict[str, type[ImpositionError]] = {cls.code: cls for cls in _all_error_classes()}


def is_notice(code: str) -> bool:
    """True for the code of a :class:`Notice` (``preview_failed``, ``pages_turned``): reported with the
    warnings, never made a failure by ``on_warning: fail``."""
    cls = ERRORS_BY_CODE.get(code)
    return cls is not None and issubclass(cls, Notice)


def error_from_code(code: str, message: str) -> ImpositionError:
    """Rebuild the error a child process reported as ``(code, message)``.

    An unknown code gives :class:`EngineCrashed` (retryable), keeping the original code in the message.
    """
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        return EngineCrashed(f"engine reported unknown error code {code!r}: {message}")
    return cls(message)
