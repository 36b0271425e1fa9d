"""The floors no imposition can beat, as commands and as functions.

    python -m bench.copy_floor input.pdf output.pdf            # the copy floor
    python -m bench.copy_floor --rewrite input.pdf output.pdf  # the rewrite floor

* :func:`copy_pages` (the engine issue's floor): open the input, append every page to a new PDF with
  pikepdf's page list (``pages.extend``), save with pikepdf's defaults.
* :func:`rewrite` (a stricter floor): open the input and save it unchanged, as the engine saves a plate
  (:func:`imposition.engine.drawing.save_plate`: unencrypted, the /ID a digest of the file). Any pikepdf
  tool that writes every page at least reads every object and writes it again; the engine, which
  draws into the source document, does exactly that plus the imposition.

pikepdf's ``PageList.append``/``extend`` counts the pages on every insertion (its ``count()``
builds the page list: O(pages) per page), so the copy floor grows faster than linearly with pages;
the rewrite floor does not.
"""

import sys
from pathlib import Path

import pikepdf


def copy_pages(source: Path, target: Path) -> None:
    """Open ``source``, append every page to a new PDF, save it to ``target``."""
    with pikepdf.open(source) as pdf, pikepdf.new() as copy:
        copy.pages.extend(pdf.pages)
        copy.save(target)


def rewrite(source: Path, target: Path) -> None:
    """Open ``source`` and save it unchanged to ``target``, as the engine saves a plate."""
    from imposition.engine.drawing import save_plate  # only this floor needs the engine's save

    with pikepdf.open(source) as pdf:
        save_plate(pdf, target)


def main(argv: list[str]) -> None:
    floor = rewrite if argv[0] == "--rewrite" else copy_pages
    source, target = argv[-2:]
    floor(Path(source), Path(target))


if __name__ == "__main__":
    main(sys.argv[1:])
