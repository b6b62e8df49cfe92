"""Every summary the tests produce is checked against the summary.json contract (issue 13, item 1).

The contract is ``pipeprof/schemas/summary.schema.json``. Two nets:

* In the test process: ``pipeprof.analysis.summary.summarize`` is wrapped here, before
  any test module imports it, so every summary a test computes — directly, or through
  the CLI's ``main()`` called in-process — is validated as the JSON it becomes, where
  it is made (the failing test names the summary's problem).
* Written by other processes (``pipeprof run`` / ``profile`` run as subprocesses): at
  the end of the session every ``summary.json`` under pytest's temporary folders is
  validated. Files a test wrote by hand as a fake (for the index, the run folder's
  round trip) carry no ``schema_version`` and are not pipeprof's summaries.

Two guards keep one test's trouble its own:

* Ctrl-C reaches the runs the tests start however the suite was launched: a shell
  without job control starts a background command with SIGINT ignored, which its
  children inherit (a Python child then never raises KeyboardInterrupt, a shell's
  ``trap ... INT`` never fires); here the handler is Python's own again, and a
  handled signal is default again in every child.
* A ``pipeprof`` process a test started and left running (a failed test of a run of
  200,000 steps that Ctrl-C was to stop) is killed when the test ends: it would
  take the cores from every later test, whose timings then fail too.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import psutil
import pytest
from support.profiled import ProfiledRuns
from support.shared import made_once_folders

import pipeprof
from pipeprof.pipeline import derive as summary_module
from pipeprof.run_folder import to_json
from pipeprof.script.protocol import WHAT_IFS_ENV
from pipeprof.track_record import ENV as TRACK_RECORD_ENV

# The what-if segments add a second or more to every `pipeprof profile --steps` run: off for the suite, on in
# the tests of them (tests/test_segments.py sets PIPEPROF_WHAT_IFS=1 or passes what_ifs=True).
os.environ.setdefault(WHAT_IFS_ENV, "0")
# Nothing the suite checks goes into the user's track record (each test has its own: own_track_record, below)
os.environ[TRACK_RECORD_ENV] = os.path.join(tempfile.mkdtemp(prefix="pipeprof-track-"), "track-record.jsonl")

SCHEMA_PATH = Path(pipeprof.__file__).parent / "schemas" / "summary.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def schema_errors(summary: Any) -> list[str]:
    """What makes ``summary`` (summary.json as parsed JSON) break the contract, one line each; empty if nothing."""
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message[:300]}"
            for e in sorted(VALIDATOR.iter_errors(summary), key=lambda e: list(map(str, e.absolute_path)))]


def _validated(summarize):
    @functools.wraps(summarize)
    def checked(*args, **kwargs):
        summary = summarize(*args, **kwargs)
        errors = schema_errors(json.loads(to_json(summary)))  # as written: NaN is null in summary.json
        if errors:
            raise AssertionError("summarize() broke summary.schema.json:\n  " + "\n  ".join(errors))
        return summary

    checked.validated = True
    return checked


if not getattr(summary_module.summarize, "validated", False):
    summary_module.summarize = _validated(summary_module.summarize)


@pytest.fixture(scope="session", autouse=True)
def written_summaries_match_the_schema(tmp_path_factory):
    yield
    bad = []
    folders = [tmp_path_factory.getbasetemp(), *made_once_folders(tmp_path_factory)]  # its own and the shared
    for path in sorted({p for folder in folders for p in folder.rglob("summary.json")}):
        if path.is_symlink() or not path.is_file():
            continue  # a security test's link to a file that is not a summary
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a deliberately broken file: the tests that wrote it check how pipeprof reads it
        if isinstance(summary, dict) and "schema_version" in summary:
            bad += [f"{path}: {error}" for error in schema_errors(summary)]
    assert not bad, "summary.json files that break summary.schema.json:\n  " + "\n  ".join(bad[:50])


@pytest.fixture(scope="session")
def profiled_runs(tmp_path_factory) -> Iterator[ProfiledRuns]:
    """Real ``pipeprof profile`` runs shared by every test that reads one: one per command line a session."""
    runs = ProfiledRuns(tmp_path_factory)
    yield runs
    changed = runs.changed()
    assert not changed, f"tests wrote into shared run folders (copy one first: Profiled.copy_to): {changed}"


# Every test has a time limit (pyproject's `timeout`); a test marked `integration`, which runs the whole program
# and may make a shared run first, gets this longer one unless it sets its own with @pytest.mark.timeout.
INTEGRATION_TIMEOUT_S = 600


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if item.get_closest_marker("integration") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT_S))
        # Under `-n N --dist loadgroup` a file's tests stay on one worker, so its module-scoped fixtures are made
        # once; tests of several files that read one shared run name a group of their own (xdist_group).
        if grouped and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _pipeprof_descendants() -> dict[int, psutil.Process]:
    found = {}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any("pipeprof" in part for part in proc.cmdline()):
                found[proc.pid] = proc
    return found


@pytest.fixture(autouse=True)
def own_track_record(tmp_path_factory, monkeypatch):
    """Each test its own, empty track record of checked predictions (pipeprof.track_record): a sweep or --verify in
    one test never moves another's intervals, and none is written into the user's cache folder."""
    monkeypatch.setenv(TRACK_RECORD_ENV, str(tmp_path_factory.mktemp("track") / "track-record.jsonl"))


@pytest.fixture(autouse=True)
def no_run_outlives_its_test():
    before = _pipeprof_descendants()
    yield
    left = [proc for pid, proc in _pipeprof_descendants().items() if pid not in before]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=5)
