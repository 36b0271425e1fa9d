"""Regenerate the demo's sample PDFs: ``python -m samples.make_samples`` (from the repository root).

``a5_8p.pdf``, ``a5_13p_odd.pdf`` and ``a5_bleed_3mm_8p.pdf`` are copies of handed cases 1, 2 and 7
(kept as they are: the last has 3 mm of bleed, a 142 × 204 mm trim); this script writes
``a5_16p.pdf`` and ``a5_24p.pdf``: A5 pages with text, one image each and page labels P1, P2, ...,
and ``a6_32p.pdf``: 32 A6 pages of text for the 32-page signatures (see :mod:`bench.documents`).
``samples/README.md`` names the PDF each shipped layout runs on.
"""

from pathlib import Path

from bench.documents import MM, labelled_document

HERE = Path(__file__).parent


def main() -> None:
    for page_count in (16, 24):
        path = labelled_document(HERE / f"a5_{page_count}p.pdf", page_count)
        print(path)
    print(labelled_document(HERE / "a6_32p.pdf", 32, size_pt=(105 * MM, 148 * MM), images=False))


if __name__ == "__main__":
    main()
