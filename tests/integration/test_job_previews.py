"""Previews and the warm engine child on the real local stack: one real ``celery worker -Q
imposition -c 1``, the moto server for S3, SQS and DynamoDB, real PDFs.

* Every job stores a PNG of each side beside its plate (``…/preview-<n>.png``), the job item, ``job
  show`` and the webhook payload name them, and ``job download --previews`` fetches them.
* The worker process's engine child is started with the process and serves job after job (the same
  pid before, between and after two jobs).
"""

from __future__ import annotations

import json
import uuid

import psutil
import pytest
from PIL import Image

from tests.adversarial.support import submit_bytes
from tests.conftest import reset_aws
from tests.imposition.imposition_pdfs import labelled_pdf
from tests.ops.helpers import cli, cli_json
from tests.support.cluster import Cluster
from tests.support.processes import start_worker, wait_for

LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    reset_aws()
    process = start_worker(tmp_path_factory.mktemp("previews"), concurrency=1, name="preview-imposer")
    yield process
    process.stop()


@pytest.fixture
def tenant() -> str:
    return f"pv-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pdf(tmp_path) -> bytes:
    """An 8-page A5 document, each page labelled (a booklet of 4 sides)."""
    return labelled_pdf(tmp_path / "input.pdf", 8).read_bytes()


def engine_children(worker) -> set[int]:
    """Pids of the engine children of the worker's pool processes."""
    return {c.pid for pool_pid in worker.children() for c in psutil.Process(pool_pid).children()
            if "imposition.engine.child" in " ".join(c.cmdline())}


def test_a_job_stores_names_and_hands_out_a_preview_of_each_side(worker, tenant, pdf, tmp_path):
    from imposition.common import aws
    from imposition.common.settings import get_settings
    from imposition.webhooks.events import job_event
    from tasks.results import job_meta

    job = Cluster.final(submit_bytes(tenant, pdf, layout=LAYOUT))
    assert job.status == "succeeded", job.error
    prefix = f"tenants/{tenant}/jobs/{job.job_id}/"
    assert job.preview_keys == [f"{prefix}preview-{n}.png" for n in range(1, int(job.sides) + 1)]
    assert int(job.sides) == 4 and job.warnings == []
    for key in job.preview_keys:
        head = aws.s3().head_object(Bucket=get_settings().bucket, Key=key)
        assert head["ContentType"] == "image/png" and head["ContentLength"] > 0
    assert cli_json("job", "show", job.job_id)["preview_keys"] == job.preview_keys
    assert job_event(job)["preview_keys"] == job.preview_keys
    # the plan's JDF Layout beside the plate, named wherever the previews are
    assert job.jdf_key == f"{prefix}plate.jdf"
    head = aws.s3().head_object(Bucket=get_settings().bucket, Key=job.jdf_key)
    assert head["ContentType"] == "application/vnd.cip4-jdf+xml" and head["ContentLength"] > 0
    assert cli_json("job", "show", job.job_id)["jdf_key"] == job_event(job)["jdf_key"] == job.jdf_key
    assert job_meta(job, job.job_id)["result"]["jdf_key"] == job.jdf_key  # what r.get() returns

    previews = tmp_path / "previews"
    previews.mkdir()
    output = cli("job", "download", job.job_id, "-o", str(tmp_path / "plate.pdf"), "--previews", str(previews),
                 "--jdf").output
    assert (tmp_path / "plate.jdf").read_bytes().startswith(b"<?xml")
    assert f"wrote the JDF Layout of job {job.job_id} ({tenant}) to {tmp_path / 'plate.jdf'} (" in output
    names = sorted(p.name for p in previews.iterdir())
    assert names == [f"{job.job_id}-preview-{n}.png" for n in range(1, 5)]
    assert output.count(f"wrote the preview of job {job.job_id}") == 4 and (tmp_path / "plate.pdf").stat().st_size > 0
    for name in names:
        with Image.open(previews / name) as image:
            width_px, height_px = image.size
            assert max(image.size) == get_settings().preview_max_px
            assert abs(width_px / height_px - 297 / 210) < 0.005  # A4 landscape
            grey = image.convert("L")
            inked = sum(count for value, count in enumerate(grey.histogram()) if value < 128)
            assert inked > 0  # the pages' labels and frames


def test_download_of_previews_into_a_folder_that_does_not_exist_is_refused(worker, tenant, pdf, tmp_path):
    job = Cluster.final(submit_bytes(tenant, pdf, layout=LAYOUT))
    result = cli("job", "download", job.job_id, "-o", str(tmp_path / "p.pdf"), "--previews", str(tmp_path / "no"),
                 expect=2)
    assert "does not exist" in result.output and not (tmp_path / "p.pdf").exists()


def test_the_worker_process_keeps_one_warm_engine_child_across_jobs(worker, tenant, pdf):
    before = wait_for(lambda: engine_children(worker), 60, what="the pool process's warm engine child")
    assert len(before) == 1  # started with the process, before any job of this test
    first = Cluster.final(submit_bytes(tenant, pdf, layout=LAYOUT))
    between = engine_children(worker)
    second = Cluster.final(submit_bytes(tenant, pdf, layout=LAYOUT))
    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert before == between == engine_children(worker)
    log = worker.log_path.read_text()
    assert log.count("warm engine child") == 1, json.dumps(log[-2000:])
