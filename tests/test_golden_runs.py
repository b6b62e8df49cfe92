"""Committed run folders re-derive the summary.json committed beside them, unchanged.

The folders under tests/fixtures/runs/ were recorded by real runs (a scenario in RAM, a
memmap scenario with two workers and cProfile, a profiled script, a profiled script that
failed at step 25) before the house was restructured; ``pipeprof report`` must derive the
same summaries from their raw records. A change here is a change of the summary.json
contract: make it on purpose, document it in the README, and re-record the fixture.

Documented changes since the fixtures were recorded (issue 13): ``bottleneck`` and
``bottleneck_reason`` are derived from the verdict (its class in coarse form), and a run
with no counted steps is ``unknown`` rather than ``balanced``. All four fixtures are
input-bound with a cause, so none of their summaries changed: they re-derive exactly.
"""

import json
import shutil
from pathlib import Path

import pytest

from pipeprof.analysis.verdict import coarse
from pipeprof.cli.main import main

RUNS = Path(__file__).parent / "fixtures" / "runs"
FOLDERS = sorted(p.name for p in RUNS.iterdir() if (p / "run.json").exists())


def test_the_fixtures_cover_scenarios_scripts_and_a_failure():
    kinds = {json.loads((RUNS / f / "run.json").read_text()).get("status") for f in FOLDERS}
    assert len(FOLDERS) >= 4 and {"complete", "failed"} <= kinds


@pytest.mark.parametrize("name", FOLDERS)
def test_report_re_derives_the_committed_summary(tmp_path, name, capsys):
    folder = tmp_path / name
    shutil.copytree(RUNS / name, folder)
    expected = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").unlink()
    assert main(["report", "--quiet", str(folder)]) == 0
    derived = json.loads((folder / "summary.json").read_text())
    assert derived == expected
    assert derived["bottleneck"] == coarse(derived["verdict"]["class"])  # one headline
    assert (folder / "report.html").stat().st_size > 10_000
