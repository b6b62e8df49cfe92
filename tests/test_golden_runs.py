"""Committed run folders re-derive the summary.json committed beside them, unchanged.

The folders under tests/fixtures/runs/ were recorded by real runs (a scenario in RAM, a
memmap scenario with two workers and cProfile, a profiled script, a profiled script that
failed at step 25) before the house was restructured; ``pipeprof report`` must derive the
same summaries from their raw records. A change here is a change of the summary.json
contract: make it on purpose, document it in the README, and re-record the fixture.

Documented changes since the fixtures were recorded (issue 13), re-recorded by running
``pipeprof report`` on a copy of each folder:

* ``bottleneck`` and ``bottleneck_reason`` are derived from the verdict (its class in
  coarse form), and a run with no counted steps is ``unknown`` rather than ``balanced``.
  All four fixtures are input-bound with a cause: their values did not change.
* ``loading`` (and each ``loading.by_worker`` entry) names its times with their units, as
  the attribution does: ``fetch_s`` -> ``fetch_per_sample_s``, ``prep_s`` ->
  ``prep_per_sample_s``, ``collate_s`` -> ``collate_per_batch_s``; the values are the same.
* ``schema_version`` is 2: the renames above and the new ``unknown`` class are incompatible for a
  reader of version 1.
* Issue 14, item 8: workers that were never seen (no ``worker`` process snapshot, no sampler tick
  counting one) have no memory: ``memory.peak_workers_rss_bytes`` and ``memory.uss_bytes.workers``
  are null ("not measured"), no longer 0.0 (all four fixtures; the memmap scenario asked for two
  workers, but its sampler never saw one). A script's summary adds ``script.wall_s`` (its wall time;
  ``duration_s`` stays the sum of counted steps), and every recommendation of a failed or interrupted
  run carries the caveat that it ended early in its ``note`` (``script-failed``: "the run ended early
  (failed) after 25 steps (20 counted) ...").
* Issue 14, item 6: ``loading`` gains ``core_wait_per_sample_s`` and ``fractions.core_wait`` (each
  ``by_worker`` entry its ``core_wait_per_sample_s``), the attribution's ``loading`` its
  ``core_wait_per_sample_s`` and ``core_wait_fraction``: waiting for a core, split out of fetch. The
  fixtures were recorded without run-queue readings, so all are null (unknown) and fetch is unchanged.
* Issue 14, item 7: ``verdict`` gains ``uncertain`` and ``candidates``. Two fixtures had two parts of the
  wait within the 10-point margin and are now uncertain between them, their class the candidate of the
  rule first in the table: ``scenario-ram`` (fetch 45 % against 52 % collating and the process's own
  work: ``input:fetch`` or ``input:main``, was ``input:main``) and ``script-plain-loop`` (prep 48 % against
  51 %: ``input:prep`` or ``input:main``, was ``input:main``); the class first recorded is among the
  candidates. ``code_profile``'s absence reasons of a script run fit ``pipeprof profile`` (item 11).
* Issue 15 (distributed jobs): ``fractions`` gains ``collective_wait`` and the attribution's ``step`` its
  ``collective_wait_fraction`` (time blocked in collectives, out of compute: 0.0 for these one-process runs,
  whose steps.csv predates the column and loads it as 0); the summary gains ``ranks`` (``[]``) and
  ``straggler`` (null) and ``job`` (null). Nothing else moved.
* Issue 16 (the device's clock): the summary gains ``timing`` (which clock timed each part: these runs'
  run.json says ``host-clock`` alone, so every part is ``host-clock`` and the reason unknown, null) and
  ``device_memory`` (``{"absent": ...}``: torch.cuda's memory is read on CUDA only). Nothing else moved.
* Issue 17 (predictions with intervals): every recommendation gains ``interval`` (its 80 % range from a
  block bootstrap of the run, ``analysis.intervals``); these runs predate the what-if probes, so their
  predictions are the analytical model's, unchanged in number, and their ``model`` says so.
  Nothing else moved.
* Issue 17 (the k-worker model measured on real runs: receive and send costs, an exponential stall, the
  workers' start-up per pass): recommendations moved where workers were predicted. ``script-plain-loop``
  and ``script-failed`` no longer recommend 1 worker with 1 torch thread (x1.53, x2.0: the supply-only model;
  a plain_loop script measured 0.53x for 0 -> 1 worker) but nothing (the honest negative); ``scenario-ram``
  drops the same change (x1.71); ``scenario-memmap-workers-cprofile`` gains ``train.threads = 1`` (x1.41: its
  2 workers get their own cores, no stall). ``RECOMMENDATIONS_SINCE_17`` holds each fixture's list as it is
  now; the others' numbers did not move.
* Issue 17 (stop 24: a run with workers receives a batch in its own measured wall time, the median wait of
  its steps whose batch was already waiting, not the estimated CPU): ``scenario-memmap-workers-cprofile``
  took 41 us a sample there (12.6 us estimated) and no longer recommends ``train.threads = 1`` (x1.41 ->
  x0.95: its 2 workers and 1 thread still want 3 of 2 cores, and each handover keeps its cost). Nothing
  else moved.
* Issue 18 (inside the sample): the summary gains ``transforms`` and ``decode``, ``loading`` its ``split``
  and each of a script's ``loaders`` its ``transforms`` and ``decode``; these runs predate transforms.csv, so
  all are null. Nothing else moved.
* Issue 32, item 4 (in a DataLoader worker everything is loading): ``scenario-memmap-workers-cprofile``'s
  workers' cProfile groups moved 0.02 % of their self time from ``compute`` (torch operations a worker ran)
  to ``loading`` (``code_profile.cprofile.processes.workers.groups``: compute 0.0). Nothing else moved.
* Issue 34 (predictions in tiers): every recommendation gains ``tier`` (``measured``, ``estimated`` or
  ``not_predicted``). These runs predate the what-if probes, so their predictions are estimates
  ``min(C, k workers at the measured rate on the cores available, S)`` with no fitted term: the memmap
  scenario keeps ``data.storage = "device"`` (x8.9, the compute ceiling) and drops ``num_workers = 0`` (fewer
  workers are no longer estimated); ``scenario-ram`` and both scripts gain ``num_workers = 1`` (x1.71, x2.0,
  x1.53: no receive cost or stall is assumed any more); ``scenario-ram``'s whole batches are ``not_predicted``
  (their 90 %/80 % savings were assumptions). Intervals take 8 resamples (were 4). Nothing else moved.
* Issue 35 (the renderer only formats): each ``loading.by_worker`` entry gains ``fetch_max_s``, the slowest
  single sample's fetch, which the report's loading table showed from the raw records and now reads from the
  summary (null where a script's hooks did not time it). The report did not change. Nothing else moved.
* Issue 44, item 4 (the same advice twice): changes of one tier within each other's noise (each predicted inside
  the other's interval) are ranked by the smaller change, each with a note naming the others: ``scenario-ram``'s
  ``data.storage = "device"`` (x2.02, 87,537-176,226 samples/s) and ``num_workers = 1`` (x1.71, 73,929-148,885)
  keep their order and gain that ``note``. Nothing else moved.
* Issue 44 (advice that holds on the user's script; benchmarks/advice_check.py): an estimate of more workers from
  a run at 0 workers whose loop was never measured beside a worker says, in its ``note``, that receiving each
  batch from a worker is not in it and how to measure it: ``num_workers = 1`` of ``scenario-ram``,
  ``script-plain-loop`` and ``script-failed`` (a note before the ones they had). Nothing else moved.
* Issue 44, item 6 (the user's view names no source file): each interval's ``method`` ends "(the yardstick's
  typical: pipeprof's benchmark of its own predictions)", where it named ``benchmarks/predict.py``. Nothing else
  moved.
* Sentences (``verdict.sentence``, recommendations' ``reason``, ...) are worded by
  ``pipeprof.format`` (issue 13, item 6). ``test_only_the_documented_keys_changed`` holds
  the fixtures to exactly these changes against their first recorded version.

The report is pinned too: each fixture's report.html (in a normalised text form: the charts by the data they
were given and the text they show) and its terminal summary are compared with the snapshots in
tests/fixtures/snapshots/ (tests/support/snapshots.py). ``PIPEPROF_UPDATE_SNAPSHOTS=1`` rewrites them, for an
intended change to be reviewed in the commit's diff.
"""

import io
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.snapshots import SNAPSHOTS, UNRECORDED, assert_matches, normalised_html, recording_charts

from pipeprof.analysis.verdict import coarse
from pipeprof.cli.main import main
from pipeprof.render.console import print_summary

RUNS = Path(__file__).parent / "fixtures" / "runs"
FOLDERS = sorted(p.name for p in RUNS.iterdir() if (p / "run.json").exists())
TERMINAL_COLUMNS = 100


@dataclass(frozen=True)
class Reported:
    """What ``pipeprof report`` wrote into a copy of one fixture, and the data each of its charts was drawn from."""

    summary: dict[str, Any]
    expected: dict[str, Any]  # the committed summary.json
    page: str  # report.html
    charts: dict[str, list[str]]


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> Callable[[str], Reported]:
    """``pipeprof report`` (in-process) on a copy of a fixture, once a module for each fixture."""
    done: dict[str, Reported] = {}

    def report(name: str) -> Reported:
        if name not in done:
            folder = tmp_path_factory.mktemp("golden") / name
            shutil.copytree(RUNS / name, folder)
            expected = json.loads((folder / "summary.json").read_text())
            (folder / "summary.json").unlink()
            with recording_charts() as charts:
                assert main(["report", "--quiet", str(folder)]) == 0
            done[name] = Reported(json.loads((folder / "summary.json").read_text()), expected,
                                  (folder / "report.html").read_text(encoding="utf-8"), charts)
        return done[name]
    return report


def test_the_fixtures_cover_scenarios_scripts_and_a_failure():
    kinds = {json.loads((RUNS / f / "run.json").read_text()).get("status") for f in FOLDERS}
    assert len(FOLDERS) >= 4 and {"complete", "failed"} <= kinds


@pytest.mark.parametrize("name", FOLDERS)
def test_report_re_derives_the_committed_summary(name, reported):
    derived = reported(name)
    assert derived.summary == derived.expected
    assert derived.summary["bottleneck"] == coarse(derived.summary["verdict"]["class"])  # one headline
    assert len(derived.page) > 10_000


@pytest.mark.parametrize("name", FOLDERS)
def test_the_report_page_matches_its_snapshot(name, reported):
    """report.html as its snapshot holds it (tests/support/snapshots.py: the charts by their data and text)."""
    derived = reported(name)
    text = normalised_html(derived.page, derived.charts)
    assert derived.charts and UNRECORDED not in text, "a chart whose data was not recorded"
    assert_matches(SNAPSHOTS / f"{name}.report.txt", text, f"{name}: report.html")


@pytest.mark.parametrize("name", FOLDERS)
def test_the_terminal_summary_matches_its_snapshot(name, reported):
    out = io.StringIO()
    console = Console(file=out, width=TERMINAL_COLUMNS, color_system=None, force_terminal=False)
    print_summary(reported(name).summary, Path("runs") / name, console)
    text = "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())  # rich pads every line
    assert_matches(SNAPSHOTS / f"{name}.terminal.txt", text, f"{name}: the terminal summary")


def test_every_snapshot_belongs_to_a_golden_run():
    """A snapshot left behind by a fixture that is gone (or renamed) would pin nothing: take it away."""
    expected = {f"{name}.{kind}.txt" for name in FOLDERS for kind in ("report", "terminal")}
    assert {p.name for p in SNAPSHOTS.iterdir()} == expected


RENAMED_LOADING_KEYS = {"fetch_s": "fetch_per_sample_s", "prep_s": "prep_per_sample_s",
                        "collate_s": "collate_per_batch_s"}


def _as_recorded(loading: dict | None) -> dict | None:
    """summary.json's ``loading`` with the keys it had when the fixtures were recorded."""
    if loading is None:
        return None
    back = {v: k for k, v in RENAMED_LOADING_KEYS.items()}
    out = {back.get(k, k): v for k, v in loading.items()}
    out["by_worker"] = {w: {back.get(k, k): v for k, v in stats.items()} for w, stats in loading["by_worker"].items()}
    return out


@pytest.mark.parametrize("name", FOLDERS)
def test_only_the_documented_keys_changed(name):
    """Against the summary.json first recorded (git's first version of each fixture): only the renames,
    and sentences reworded."""
    path = RUNS / name / "summary.json"
    first = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", str(path)], capture_output=True,
                           text=True, cwd=RUNS).stdout.split()
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], capture_output=True, text=True,
                             cwd=RUNS).stdout.strip()
    if not first or shallow != "false":
        pytest.skip("not in a git checkout with its history (a shallow clone lacks the first recording)")
    recorded = json.loads(subprocess.run(["git", "show", f"{first[-1]}:./{path.name}"], capture_output=True, text=True,
                                         cwd=path.parent, check=True).stdout)
    now = _before_issue_18(_before_issue_32(_before_issue_35(json.loads(path.read_text())), recorded))
    assert (recorded["schema_version"], now["schema_version"]) == (1, 2)
    earlier = _before_issue_15(_before_issue_16(_before_issue_17(now, name, recorded)))
    as_recorded = _before_issue_14({**earlier, "loading": _as_recorded(now["loading"]), "schema_version": 1},
                                   recorded["verdict"]["class"])
    assert _without_prose(as_recorded) == _without_prose(recorded)


# Each fixture's recommendations since issue 34's tiers: (change, tier, predicted speed-up to 2 places).
RECOMMENDATIONS_NOW = {
    "scenario-memmap-workers-cprofile": [({"data.storage": "device", "loader.num_workers": 0}, "estimated", 8.9)],
    "scenario-ram": [({"data.storage": "device"}, "estimated", 2.02), ({"loader.num_workers": 1}, "estimated", 1.71),
                     ({}, "not_predicted", None)],
    "script-failed": [({"loader.num_workers": 1}, "estimated", 2.0)],
    "script-plain-loop": [({"loader.num_workers": 1}, "estimated", 1.53)],
}


def _before_issue_35(summary: dict) -> dict:
    """summary.json without each worker's ``fetch_max_s`` (issue 35: the report reads it from the summary)."""
    out = json.loads(json.dumps(summary))
    for stats in out["loading"]["by_worker"].values():
        fetch_max_s = stats.pop("fetch_max_s")
        assert fetch_max_s is None or fetch_max_s >= stats["fetch_per_sample_s"]
    return out


def _before_issue_32(summary: dict, recorded: dict) -> dict:
    """summary.json with the workers' cProfile groups as first recorded, where issue 32 (item 4: in a worker
    everything is loading) moved them: compute is 0, and loading took what it had."""
    out = json.loads(json.dumps(summary))
    workers = ((out.get("code_profile") or {}).get("cprofile") or {}).get("processes", {}).get("workers") or {}
    first = ((recorded.get("code_profile") or {}).get("cprofile") or {}).get("processes", {}).get("workers") or {}
    if "groups" in workers and "groups" in first:
        now, then = workers["groups"], first["groups"]
        assert now["compute"] == 0.0
        assert now["loading"] == pytest.approx(then["loading"] + then["compute"])
        workers["groups"] = then
    return out


def _before_issue_18(summary: dict) -> dict:
    """summary.json without issue 18's keys, null in runs recorded before transforms.csv."""
    out = json.loads(json.dumps(summary))
    assert out.pop("transforms") is None and out.pop("decode") is None and out["loading"].pop("split") is None
    for loader in out.get("loaders") or []:
        assert loader.pop("transforms") is None and loader.pop("decode") is None
    return out


def _before_issue_17(summary: dict, name: str, recorded: dict) -> dict:
    """summary.json without issue 17's intervals (each recommendation's ``interval`` brackets its prediction),
    its recommendations (with issue 34's tiers) as documented above and then as first recorded."""
    out = json.loads(json.dumps(summary))
    for rec in out["recommendations"]:
        interval = rec.pop("interval")
        if interval["samples_per_s"] is not None:
            low, high = interval["samples_per_s"]
            assert low <= rec["predicted_samples_per_s"] <= high and interval["level"] == 0.8
    assert [(r["change"], r.pop("tier"), r["predicted_speedup"] and round(r["predicted_speedup"], 2))
            for r in out["recommendations"]] == RECOMMENDATIONS_NOW[name]
    out["recommendations"] = recorded["recommendations"]
    return out


def _before_issue_16(summary: dict) -> dict:
    """summary.json without issue 16's keys, at what runs recorded on the CPU before it hold."""
    out = json.loads(json.dumps(summary))
    assert out.pop("timing") == {"method": "host-clock", "parts": dict.fromkeys(("data_wait", "h2d", "compute"),
                                                                                "host-clock"), "reason": None}
    assert "on CUDA only" in out.pop("device_memory")["absent"]
    return out


def _before_issue_15(summary: dict) -> dict:
    """summary.json without issue 15's keys, which one-process runs hold at their empty values."""
    out = json.loads(json.dumps(summary))
    assert out.pop("ranks") == [] and out.pop("straggler") is None and out.pop("job") is None
    assert out["fractions"].pop("collective_wait") == 0.0
    assert out["attribution"]["step"].pop("collective_wait_fraction") == 0.0
    return out


def _before_issue_14(summary: dict, recorded_class: str) -> dict:
    """summary.json as it read before issue 14's documented changes (see the module docstring)."""
    out = json.loads(json.dumps(summary))
    memory = out["memory"]
    if memory["peak_workers_rss_bytes"] is None:
        memory["peak_workers_rss_bytes"] = 0.0
    if isinstance(memory.get("uss_bytes"), dict) and memory["uss_bytes"]["workers"] is None:
        memory["uss_bytes"]["workers"] = 0.0
    if isinstance(out.get("script"), dict):
        out["script"].pop("wall_s", None)
    for rec in out["recommendations"]:
        if str(rec.get("note", "")).startswith("the run ended early"):
            del rec["note"]
    for section in (out["loading"], out["loading"]["fractions"], *out["loading"]["by_worker"].values(),
                    out["attribution"]["loading"]):
        for key in ("core_wait_per_sample_s", "core_wait", "core_wait_fraction"):
            assert section.pop(key, None) is None  # recorded without run-queue readings: unknown
    verdict = out["verdict"]
    if verdict.pop("uncertain"):
        assert verdict["class"] == verdict["candidates"][0] and recorded_class in verdict["candidates"]
        verdict["class"] = recorded_class
    else:
        assert verdict["candidates"] == [verdict["class"]]
    del verdict["candidates"]
    return out


# Sentences for people: reworded by the one formatting module (issue 13, item 6: units, plurals), never a key
# or a number. Everything else must be as first recorded.
PROSE = {"sentence", "notes", "reason", "note", "bottleneck_reason", "model", "code_change", "script_text", "absent"}


def _without_prose(value):
    if isinstance(value, dict):
        return {k: ("<prose>" if k in PROSE else _without_prose(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_prose(v) for v in value]
    return value
