"""The session's shared runs (tests/support/profiled.py): one run per command line, and a shared folder a test
wrote into is found. ``profile`` is faked here: it writes a run folder and counts its calls."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import profiled
from support.profiled import Profiled, ProfiledRuns, report_folder


@pytest.fixture
def made(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []

    def fake_profile(out: Path, *command: str, options=(), cwd=None, env=None, timeout=0.0) -> Profiled:
        calls.append((out, command, tuple(options), cwd, dict(env or {})))
        folder = out / "run"
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text("{}")
        proc = subprocess.CompletedProcess(["pipeprof"], 0, f"report: {folder / 'report.html'}\n", "")
        return Profiled(proc, folder, {}, {})

    monkeypatch.setattr(profiled, "profile", fake_profile)
    return calls


def test_a_command_line_is_run_once_and_each_difference_is_a_run_of_its_own(tmp_path, made):
    runs = ProfiledRuns(tmp_path)
    first = runs("python", "train.py", "--epochs", "1")
    assert runs("python", "train.py", "--epochs", "1") is first and len(made) == 1
    runs("python", "train.py", "--epochs", "2")
    runs("python", "train.py", "--epochs", "1", options=("--steps", "8"))
    runs("python", "train.py", "--epochs", "1", env={"PIPEPROF_WHAT_IFS": "1"})
    runs("python", "train.py", "--epochs", "1", cwd=tmp_path)
    assert len(made) == 5 and len({out for out, *_ in made}) == 5  # each in a folder of its own
    proc, folder, summary, meta = first  # unpacks as the test files' helpers always returned
    assert proc.returncode == 0 and folder == first.folder and summary == {} and meta == {}


def test_a_shared_folder_written_into_is_found_and_a_copy_is_free_to_change(tmp_path, made):
    runs = ProfiledRuns(tmp_path / "shared")
    run = runs("python", "train.py")
    copy = run.copy_to(tmp_path)
    (copy / "summary.json").write_text('{"changed": true}')
    assert runs.changed() == []
    (run.folder / "report.html").write_text("<html>")
    assert runs.changed() == [run.folder]


def test_the_run_folder_is_read_from_the_last_report_line():
    assert report_folder("noise\nreport: /a/b/report.html\nreport: /c/d/report.html\n") == Path("/c/d")
    assert report_folder("pipeprof: failed\n") is None
