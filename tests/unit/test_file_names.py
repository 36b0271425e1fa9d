"""The name of the file a tenant sent, as a job keeps it and as a worker writes its copy."""

from __future__ import annotations

import pytest

from tasks.imposition_task import INPUT_FALLBACK_NAME, local_file_name
from tasks.submission import key_file_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("sent, local", [
    ("brochure.pdf", "brochure.pdf"),
    ("order 17 – Frühjahr.pdf", "order 17 – Frühjahr.pdf"),
    ("../../etc/passwd", "passwd"),
    ("C:\\jobs\\flyer.pdf", "flyer.pdf"),
    ("tab\tand\nnewline.pdf", "tabandnewline.pdf"),
    ("..", INPUT_FALLBACK_NAME),
    (".", INPUT_FALLBACK_NAME),
    ("", INPUT_FALLBACK_NAME),
    ("a/", INPUT_FALLBACK_NAME),
])
def test_a_workers_copy_is_named_after_the_file_and_stays_in_its_folder(sent, local):
    assert local_file_name(sent) == local


def test_long_names_are_cut_on_a_character_boundary_within_255_bytes():
    name = local_file_name("é" * 300)
    assert len(name.encode("utf-8")) <= 255 and set(name) == {"é"}
    assert len(key_file_name("tenants/t/" + "ü" * 200).encode("utf-8")) <= 255
    assert key_file_name("tenants/t/jobs/j/\udcff.pdf") == "?.pdf"  # an undecodable byte of a local name
