"""Every ``imposition_jobs_total`` outcome is explained (issue 34, item 4): docs/operations.md's "Outcomes"
lists exactly the labels the service exports, each with when to worry, and ``make run``'s summary
(:func:`devstack.demo.outcome_lines`) gives each its meaning and marks one without any."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_the_operators_guide_lists_every_outcome_label_with_when_to_worry():
    from imposition.observability.metrics import JOB_OUTCOMES, OUTCOME_MEANINGS

    section = DOC.read_text().split("## Outcomes", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines()
            if re.match(r"\|\s*`", line)]
    assert {row[0].strip("`") for row in rows} == {str(o) for o in JOB_OUTCOMES}
    assert all(len(row) == 4 and all(row) for row in rows)  # what, normal, when to worry: none empty
    assert set(OUTCOME_MEANINGS) == set(JOB_OUTCOMES)


def test_the_run_summary_explains_each_outcome_and_marks_an_unknown_one():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from devstack.demo import outcome_lines
    from imposition.observability.metrics import OUTCOME_MEANINGS

    def exposition(counts: dict[tuple[str, str], int]) -> str:
        registry = CollectorRegistry()
        jobs = Counter("imposition_jobs", "Jobs by final outcome.", ("tenant", "outcome"), registry=registry)
        for labels, n in counts.items():
            jobs.labels(*labels).inc(n)
        return generate_latest(registry).decode()

    imposer = exposition({("acme", "succeeded"): 40, ("initech", "succeeded"): 3, ("initech", "duplicate_dropped"): 1,
                          ("acme", "failed"): 0})
    maintenance = exposition({("globex", "duplicate_dropped"): 1, ("globex", "vanished"): 2})
    lines = outcome_lines([imposer, maintenance])
    assert [line.split()[:2] for line in lines] == [["duplicate_dropped", "2"], ["succeeded", "43"],
                                                    ["vanished", "2"]]  # summed over nodes; none of 0 shown
    assert lines[0].endswith(OUTCOME_MEANINGS["duplicate_dropped"])
    assert lines[2].endswith("UNEXPLAINED: not in docs/operations.md")
