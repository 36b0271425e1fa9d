"""PdfToolboxEngine's licence, limits and node check, against the stand-in executable and a stand-in
licence server (a loopback listener the stand-in connects to, as pdfToolbox does with
``--licenseserver``): licence options from the settings, a licence outage within and beyond
``pdftoolbox_licence_wait_s``, RLIMIT_AS and RLIMIT_CPU on the native binary, the engine check a
worker runs at start, and the settings tying slots to the licence's processes."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest
from pydantic import ValidationError

from imposition.common.settings import Settings
from imposition.engine import parse_layout
from imposition.engine.backends import PdfToolboxEngine
from imposition.engine.backends.base import EngineJob
from imposition.engine.backends.pdftoolbox import check_engine, licence_check_wait_s
from imposition.engine.errors import LicenceUnavailable, MemoryLimitExceeded
from imposition.engine.isolation import CPU_BACKSTOP_MARGIN_S
from tasks.outcomes import is_infrastructure_failure
from tests.support.licence_server import LicenceServer

from .imposition_readback import big_labels

N_UP = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2}


def _with(settings: Settings, **update) -> Settings:
    return settings.model_copy(update=update)


def test_licence_servers_and_their_wait_are_passed_from_the_settings(stand_in_settings, case, tmp_path):
    settings = _with(stand_in_settings, pdftoolbox_licence_servers=["ls1.example:1400", "ls2.example"],
                     pdftoolbox_licence_wait_s=90.5)
    job = EngineJob(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "o.pdf", tmp_path, None, None, 0.0, 1.0)
    command = PdfToolboxEngine(settings).command(job)
    assert command[1:4] == ["--licenseserver=ls1.example:1400", "--licenseserver=ls2.example",
                            "--timeout_licenseserver=91"]  # failover in order; whole seconds, rounded up
    assert command[4:6] == [settings.pdftoolbox_process_plan, str(case("a5_8p.pdf"))]
    local = PdfToolboxEngine(stand_in_settings).command(job)
    assert not any(arg.startswith(("--licenseserver", "--timeout_licenseserver")) for arg in local)


def test_an_outage_shorter_than_the_licence_wait_is_waited_out(stand_in_settings, case, tmp_path):
    server = LicenceServer()  # down at first
    settings = _with(stand_in_settings, pdftoolbox_licence_servers=[server.address], pdftoolbox_licence_wait_s=20)
    back = threading.Timer(1.5, server.up)
    back.start()
    try:
        started = time.monotonic()
        report = PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "plate.pdf")
        waited_s = time.monotonic() - started
    finally:
        back.join()
        server.down()
    assert report.sides == 2 and report.warnings == ()
    assert sorted(l.text for side in big_labels(tmp_path / "plate.pdf") for l in side) == \
        sorted(f"P{n}" for n in range(1, 9))
    assert 1.5 <= waited_s < 20


def test_an_outage_beyond_the_licence_wait_is_a_licence_error_that_charges_no_attempt(stand_in_settings, case,
                                                                                      tmp_path):
    server = LicenceServer()  # never up
    settings = _with(stand_in_settings, pdftoolbox_licence_servers=[server.address], pdftoolbox_licence_wait_s=1)
    started = time.monotonic()
    with pytest.raises(LicenceUnavailable, match="exit code 100") as caught:
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "out" / "plate.pdf")
    assert 1 <= time.monotonic() - started < 10  # it waited pdftoolbox_licence_wait_s, then gave up
    assert caught.value.retryable and is_infrastructure_failure(caught.value)
    assert server.address in str(caught.value)  # the stand-in, like pdfToolbox, names the servers it asked
    assert list((tmp_path / "out").iterdir()) == []


def test_the_native_binary_runs_under_rlimit_as_and_rlimit_cpu(stand_in_settings, case, tmp_path):
    report_path = tmp_path / "limits.json"
    settings = _with(stand_in_settings, engine_memory_limit_bytes=1536 * 1024**2,
                     pdftoolbox_variables={"standin_report_limits": str(report_path)})
    PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "plate.pdf",
                                      time_limit_s=20)
    limits = json.loads(report_path.read_text())
    assert limits["as"] == 1536 * 1024**2
    # the CPU backstop: the job's remaining wall time, rounded up, plus the margin
    assert 20 - 5 <= limits["cpu"] - CPU_BACKSTOP_MARGIN_S <= math.ceil(20)


def test_an_allocation_past_rlimit_as_fails_the_native_binary_and_one_below_it_does_not(stand_in_settings, case,
                                                                                         tmp_path):
    limit_bytes = 1536 * 1024**2
    below = _with(stand_in_settings, engine_memory_limit_bytes=limit_bytes,
                  pdftoolbox_variables={"standin_allocate_bytes": str(256 * 1024**2)})
    assert PdfToolboxEngine(below).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "a.pdf").sides == 2
    beyond = _with(stand_in_settings, engine_memory_limit_bytes=limit_bytes,
                   pdftoolbox_variables={"standin_allocate_bytes": str(2 * limit_bytes)})
    with pytest.raises(MemoryLimitExceeded, match="exit code 134") as caught:
        PdfToolboxEngine(beyond).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "b.pdf")
    assert not caught.value.retryable and not (tmp_path / "b.pdf").exists()


def test_the_engine_check_passes_with_a_working_engine_and_licence(stand_in_settings):
    with LicenceServer() as server:
        verdict = check_engine(_with(stand_in_settings, pdftoolbox_licence_servers=[server.address]), pool_processes=2)
    assert (verdict.ok, verdict.reason) == (True, "ok")


def test_the_engine_check_fails_without_a_licence_within_half_its_time_limit(stand_in_settings):
    server = LicenceServer()  # down
    settings = _with(stand_in_settings, pdftoolbox_licence_servers=[server.address], pdftoolbox_check_time_limit_s=3)
    assert licence_check_wait_s(settings) == 1.5
    started = time.monotonic()
    verdict = check_engine(settings)
    assert (verdict.ok, verdict.reason) == (False, "licence")
    assert "exit code 100" in verdict.detail
    assert 1.5 <= time.monotonic() - started < 3  # gave up on the licence before the check's time limit


@pytest.mark.parametrize("update, detail", [
    ({"pdftoolbox_path": "/nonexistent/pdfToolbox"}, "pdftoolbox_path"),
    ({"pdftoolbox_process_plan": "/nonexistent/plan.kfpx"}, "pdftoolbox_process_plan"),
    ({"pdftoolbox_variables": {"standin_exit": "101"}}, "exit code 101"),
    ({"pdftoolbox_variables": {"standin_exit": "102"}}, "exit code 102"),
    ({"pdftoolbox_variables": {"standin_exit": "127"}}, "exit code 127"),
])
def test_the_engine_check_names_a_bad_installation(stand_in_settings, update, detail):
    verdict = check_engine(_with(stand_in_settings, **update))
    assert (verdict.ok, verdict.reason) == (False, "installation") and detail in verdict.detail


def test_the_engine_check_refuses_more_slots_than_the_licence_has_processes(stand_in_settings):
    settings = _with(stand_in_settings, pdftoolbox_licence_processes=4)
    assert check_engine(settings, pool_processes=4).ok
    verdict = check_engine(settings, pool_processes=8)
    assert (verdict.ok, verdict.reason) == (False, "processes")
    assert "8 slots" in verdict.detail and "pdftoolbox_licence_processes=4" in verdict.detail


def test_slots_per_node_may_not_exceed_the_licences_processes():
    fits = {"engine": "pdftoolbox", "engine_time_limit_s": 300, "pdftoolbox_licence_wait_s": 120}
    Settings(**fits, slots_per_node=4, pdftoolbox_licence_processes=4)
    with pytest.raises(ValidationError, match=r"slots_per_node=8 must be <= pdftoolbox_licence_processes=4"):
        Settings(**fits, slots_per_node=8, pdftoolbox_licence_processes=4)
    Settings(**{**fits, "engine": "pikepdf"}, slots_per_node=8, pdftoolbox_licence_processes=4)  # no licence


def test_the_licence_wait_must_fit_in_a_runs_time_limit():
    with pytest.raises(ValidationError, match=r"pdftoolbox_licence_wait_s=300 must be < engine_time_limit_s=300"):
        Settings(engine="pdftoolbox", pdftoolbox_licence_wait_s=300, engine_time_limit_s=300)
    defaults = Settings.model_fields
    assert defaults["pdftoolbox_licence_wait_s"].default < defaults["engine_time_limit_s"].default
