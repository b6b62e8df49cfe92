"""The session's shared runs (tests/support/profiled.py): one run per command line, and a shared folder a test
wrote into is found. ``profile`` is faked here: it writes a run folder and counts its calls. What the workers
make once (tests/support/shared.py): one build, whoever asks, and a failed build is tried again."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from support import profiled
from support.profiled import Profiled, ProfiledRuns, report_folder
from support.shared import made_once


@pytest.fixture
def made(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []

    def fake_profile(out: Path, *command: str, options=(), cwd=None, env=None, timeout=0.0) -> Profiled:
        calls.append((out, command, tuple(options), cwd, dict(env or {})))
        folder = out / "run"
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text("{}")
        (folder / "run.json").write_text("{}")
        proc = subprocess.CompletedProcess(["pipeprof"], 0, f"report: {folder / 'report.html'}\n", "")
        return Profiled(proc, folder, {}, {})

    monkeypatch.setattr(profiled, "profile", fake_profile)
    return calls


def test_a_command_line_is_run_once_and_each_difference_is_a_run_of_its_own(tmp_path, made):
    runs = ProfiledRuns(tmp_path)
    first = runs("python", "train.py", "--epochs", "1")
    assert runs("python", "train.py", "--epochs", "1") is first and len(made) == 1
    again = ProfiledRuns(tmp_path)("python", "train.py", "--epochs", "1")  # another worker's: read, not made
    assert len(made) == 1 and again.folder == first.folder and again.proc.stdout == first.proc.stdout
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


def test_what_many_workers_ask_for_at_once_is_built_once(tmp_path):
    builds: list[Path] = []

    def build(folder: Path) -> dict:
        builds.append(folder)
        (folder / "made").write_text("x")
        return {"folder": str(folder)}

    got: list = []
    threads = [threading.Thread(target=lambda: got.append(made_once(tmp_path, "the run", build))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and got == [{"folder": str(builds[0])}] * 4
    assert made_once(tmp_path, "another run", build) != got[0] and len(builds) == 2


def test_a_build_that_raised_is_tried_again_in_a_clean_folder(tmp_path):
    def failing(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError):
        made_once(tmp_path, "flaky", failing)
    assert made_once(tmp_path, "flaky", lambda folder: sorted(p.name for p in folder.iterdir())) == []
