"""Regenerate the demo's sample PDFs: ``python -m samples.make_samples`` (from the repository root).

``a5_8p.pdf`` and ``a5_13p_odd.pdf`` are copies of handed cases 1 and 2 (kept as they are);
this script writes ``a5_16p.pdf`` and ``a5_24p.pdf``: A5 pages with text, one image each and page
labels P1, P2, ... (see :mod:`bench.documents`).
"""

from pathlib import Path

from bench.documents import labelled_document

HERE = Path(__file__).parent


def main() -> None:
    for page_count in (16, 24):
        path = labelled_document(HERE / f"a5_{page_count}p.pdf", page_count)
        print(path)


if __name__ == "__main__":
    main()
