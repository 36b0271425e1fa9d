"""The floor no imposition can beat: open the input, append every page to a new PDF, save.

    python -m bench.copy_floor input.pdf output.pdf
"""

import sys

import pikepdf


def main(source: str, target: str) -> None:
    with pikepdf.open(source) as pdf, pikepdf.new() as copy:
        copy.pages.extend(pdf.pages)
        copy.save(target)


if __name__ == "__main__":
    main(*sys.argv[1:3])
