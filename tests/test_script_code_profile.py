"""`pipeprof profile --cprofile [STEPS] --pyspy [HZ] -- python SCRIPT`: the code-level view of a profiled script.

Real small runs of tests/fixtures/plain_loop.py (workers forked and spawned, and none), py-spy faked on
PATH for both of its outcomes (a file, a refusal; a real py-spy on a process is tested in
test_codeprofile), the script-side window on a fake profiler, the parent's reading of what the
processes left, and bad input.
"""

from __future__ import annotations

import io
import json
import marshal
import os
import pstats
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from pipeprof.analysis.hotspots import GROUPS
from pipeprof.pipeline.script_code_profile import collect
from pipeprof.pipeline.script_verify import report_lines
from pipeprof.script.code_profile import StepWindow, main_files
from pipeprof.script.worker_profile import workers_folder

FIXTURES = Path(__file__).parent / "fixtures"
PLAIN = ["python", str(FIXTURES / "plain_loop.py"), "--epochs", "1", "--samples", "1280", "--batch-size", "32",
         "--collate-ms", "2", "--threads", "1"]


def profile(tmp_path: Path, *options: str, command: list[str] = PLAIN, env: dict[str, str] | None = None,
            timeout: float = 240) -> tuple[subprocess.CompletedProcess, Path | None]:
    """Run `pipeprof profile --quiet OPTIONS -- COMMAND`; the process and its run folder."""
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(tmp_path / "reports"), "--quiet",
                           *options, "--", *command], capture_output=True, text=True, timeout=timeout,
                          env=env)
    lines = report_lines(proc.stdout, proc.stderr)
    return proc, Path(lines[-1]).parent if lines else None


def read(folder: Path) -> tuple[dict, dict, pd.DataFrame]:
    return (json.loads((folder / "summary.json").read_text()), json.loads((folder / "run.json").read_text()),
            pd.read_csv(folder / "functions.csv"))


def assert_profiled(folder: Path, steps: int, workers: int) -> dict:
    """Both processes in functions.csv, their dumps beside it, and the hotspot groups in summary.json."""
    summary, meta, functions = read(folder)
    assert set(functions["process"]) == {"main", "workers"}
    cprofile = summary["code_profile"]["cprofile"]
    assert cprofile["window"] == {"first_step": 5, "steps": steps, "profiled_steps": steps}
    for process in ("main", "workers"):
        info = cprofile["processes"][process]
        assert "absent" not in info, info
        assert set(info["groups"]) == set(GROUPS) and sum(info["groups"].values()) == pytest.approx(1.0)
        assert info["profiled_s"] > 0 and cprofile["top"][process]
    assert cprofile["processes"]["workers"]["processes_started"] == workers
    assert cprofile["processes"]["workers"]["processes_profiled"] == workers
    # The training thread's window holds the training step; the workers' dump holds the loading code.
    main_names = set(functions.loc[functions["process"] == "main", "function"])
    worker_names = set(functions.loc[functions["process"] == "workers", "function"])
    assert "backward" in main_names and "slow_collate" in worker_names and "slow_collate" not in main_names
    for name in ("cprofile-main.prof", "cprofile-workers.prof"):
        stats = pstats.Stats(str(folder / name), stream=io.StringIO())
        assert stats.total_tt > 0  # type: ignore[attr-defined]
    assert meta["code_profile"]["cprofile"]["process"]["pid"] == meta["script"]["started"]["pid"]
    return summary


def fake_pyspy(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose PATH finds a fake py-spy first (arguments as measure.pyspy gives them: $3 the pid,
    ${11} the output file)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "py-spy"
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


SPEEDSCOPE = '{"profiles": [{"type": "sampled", "samples": [[0], [0], [1]], "weights": [1, 1, 1]}]}'
# Writes its file when the process it records has ended (as py-spy does), or on SIGINT.
WRITES_A_FILE = f"""\
    out="${{11}}"
    trap 'printf %s '"'"'{SPEEDSCOPE}'"'"' > "$out"; exit 0' INT
    while kill -0 "$3" 2>/dev/null; do sleep 0.05; done
    printf %s '{SPEEDSCOPE}' > "$out"
    """
REFUSED = """\
    echo "Permission Denied: Try running again with elevated permissions" >&2
    exit 1
    """


@pytest.mark.integration
def test_cprofile_window_forked_workers_and_the_pyspy_file(tmp_path):
    proc, folder = profile(tmp_path, "--cprofile", "8", "--pyspy", "--loader", "num_workers=2", "--steps", "25",
                           env=fake_pyspy(tmp_path, WRITES_A_FILE))
    assert proc.returncode == 0, proc.stderr
    assert folder is not None
    summary = assert_profiled(folder, steps=8, workers=2)
    assert summary["code_profile"]["cprofile"]["overhead"]["steps_in_window"] == 8
    pyspy = summary["code_profile"]["pyspy"]
    assert pyspy["samples"] == 3 and pyspy["rate_hz"] == 20 and pyspy["file"] == "pyspy.speedscope.json"
    assert json.loads((folder / "pyspy.speedscope.json").read_text()) == json.loads(SPEEDSCOPE)
    pid = json.loads((folder / "run.json").read_text())["script"]["started"]["pid"]
    assert f"--pid {pid} --subprocesses" in pyspy["command"]


@pytest.mark.integration
def test_spawned_workers_are_profiled_too(tmp_path):
    proc, folder = profile(tmp_path, "--cprofile", "6", "--loader", "num_workers=2",
                           "--loader", "multiprocessing_context=spawn", "--steps", "20")
    assert proc.returncode == 0, proc.stderr
    assert folder is not None
    summary = assert_profiled(folder, steps=6, workers=2)
    assert summary["code_profile"]["pyspy"]["absent"].startswith("off (pipeprof profile --pyspy")


@pytest.mark.integration
def test_every_rank_of_a_spawned_job_has_its_own_window_and_workers(tmp_path):
    command = ["python", str(FIXTURES / "ddp_gloo.py"), "--world-size", "2", "--num-workers", "1",
               "--samples", "640", "--batch-size", "16"]
    proc, folder = profile(tmp_path, "--cprofile", "5", command=command)
    assert proc.returncode == 0, proc.stderr
    assert folder is not None
    summary, meta, functions = read(folder)
    cprofile = summary["code_profile"]["cprofile"]  # the job's: its median rank's
    assert meta["code_profile"]["cprofile"]["process"] == {"pid": meta["script"]["started"]["pid"],
                                                           "rank": meta["job"]["median_rank"]}
    assert set(functions["process"]) == {"main", "workers"} and cprofile["window"]["profiled_steps"] == 5
    ranks = [json.loads(p.read_text()) for p in sorted((folder / "ranks").glob("*/run.json"))]
    assert sorted(r["code_profile"]["cprofile"]["process"]["rank"] for r in ranks) == [0, 1]
    for rank in ranks:
        assert rank["code_profile"]["cprofile"]["process"]["pid"] == rank["rank"]["pid"]
        assert rank["code_profile"]["cprofile"]["workers"]["processes_profiled"] == 1
    for rank_folder in (folder / "ranks").iterdir():  # each rank's own dumps, beside its own tables
        names = {p.name for p in rank_folder.iterdir()}
        assert {"cprofile-main.prof", "cprofile-workers.prof", "functions.csv"} <= names
        assert pd.read_csv(rank_folder / "functions.csv")["process"].nunique() == 2


@pytest.mark.integration
def test_no_workers_is_said_and_pyspy_refused_is_an_absence_with_its_reason(tmp_path):
    proc, folder = profile(tmp_path, "--cprofile", "5", "--pyspy", "50", "--steps", "15",
                           env=fake_pyspy(tmp_path, REFUSED))
    assert proc.returncode == 0, proc.stderr
    assert folder is not None
    summary, meta, functions = read(folder)
    assert set(functions["process"]) == {"main"}
    workers = summary["code_profile"]["cprofile"]["processes"]["workers"]
    assert "num_workers = 0" in workers["absent"]
    assert "slow_collate" in set(functions["function"])  # made in the training process: in its window
    assert not (folder / "cprofile-workers.prof").exists()
    absent = summary["code_profile"]["pyspy"]["absent"]
    assert "status 1" in absent and "Permission Denied" in absent and meta["absences"]["pyspy"] == absent
    assert not (folder / "pyspy.speedscope.json").exists()


@pytest.mark.parametrize("options,needle", [
    (["--cprofile", "0"], "--cprofile: expected a whole number >= 1, got '0'"),
    (["--cprofile", "abc"], "--cprofile: expected a whole number, got 'abc'"),
    (["--pyspy", "-5"], "--pyspy: expected a whole number >= 1, got '-5'"),
    (["--pyspy", "5000"], "--pyspy: expected a rate in Hz, a whole number from 1 to 1000, got '5000'"),
])
def test_bad_values_exit_2_before_the_script_starts(tmp_path, options, needle):
    marker = tmp_path / "started"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc, folder = profile(tmp_path, *options, command=["python", str(script)], timeout=60)
    assert proc.returncode == 2 and folder is None
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not marker.exists() and not (tmp_path / "reports").exists()


# -- the window in the script's process, on a fake profiler ------------------------------------------------


class FakeProfiler:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stats: dict = {}

    def enable(self) -> None:
        self.calls.append("enable")

    def disable(self) -> None:
        self.calls.append("disable")

    def create_stats(self) -> None:
        if "enable" in self.calls:
            self.stats = {("f.py", 1, "f"): (1, 1, 0.5, 0.5, {})}


def test_window_follows_the_step_ends_the_hooks_count(tmp_path):
    fake = FakeProfiler()
    window = StepWindow(3, 4, str(tmp_path), lambda: fake)
    # the first batch counts before the optimizer's first step does: the same boundary seen twice
    for ended in (1, 1, 1, 2, 3, 4, 5, 6):
        window.on_step(ended)
        assert fake.calls == (["enable"] if ended >= 3 else [])
    window.on_step(7)  # 7 steps ended: steps 3, 4, 5, 6 were profiled
    assert fake.calls == ["enable", "disable"] and window.window.profiled_steps == 4
    window.dump()
    prof, record = main_files(os.getpid())
    assert marshal.loads((tmp_path / prof).read_bytes()) == fake.stats
    assert json.loads((tmp_path / record).read_text())["profiled_steps"] == 4


def test_window_never_begins_before_step_1_and_a_short_script_leaves_only_its_record(tmp_path):
    fake = FakeProfiler()
    window = StepWindow(0, 10, str(tmp_path), lambda: fake)
    assert window.window.first_step == 1  # step 0 begins before any boundary is seen
    window.dump()  # the script ended before a step did
    prof, record = main_files(os.getpid())
    assert not (tmp_path / prof).exists() and json.loads((tmp_path / record).read_text())["steps_ended"] == 0
    out = collect(tmp_path, os.getpid(), 1, 10)
    assert "training ended before the profiled window began (step 1; 0 steps ended)" == out.absences["cprofile"]
    assert out.rows == [] and out.files == {}


def test_collect_says_what_is_missing(tmp_path):
    out = collect(tmp_path, 4242, 5, 50)
    assert "pid 4242" in out.absences["cprofile"] and "left no profile" in out.absences["cprofile"]
    assert "num_workers = 0" in out.meta["workers"]["absent"]
    (tmp_path / "main-4242.json").write_text(json.dumps({"refused": "Another profiling tool is already active"}))
    assert collect(tmp_path, 4242, 5, 50).absences["cprofile"].endswith("Another profiling tool is already active")
    assert "nothing to profile" in collect(tmp_path, None, 5, 50).absences["cprofile"]


def test_collect_counts_workers_that_left_no_dump(tmp_path):
    (tmp_path / "main-7.json").write_text(json.dumps({"profiled_steps": 3}))
    (tmp_path / "main-7.prof").write_bytes(marshal.dumps({("a.py", 1, "step"): (3, 3, 0.3, 0.3, {})}))
    folder = workers_folder(tmp_path, 7)
    folder.mkdir()
    for tag in ("1-a", "2-b"):
        (folder / f"started-{tag}").touch()
    (folder / "worker-1-a.prof").write_bytes(marshal.dumps({("d.py", 9, "__getitem__"): (64, 64, 0.2, 0.2, {})}))
    other = workers_folder(tmp_path, 8)  # another rank's worker: not this process's
    other.mkdir()
    (other / "started-3-c").touch()
    out = collect(tmp_path, 7, 5, 3, rank=0)
    assert out.meta["workers"] == {"profiled": "whole life", "processes_started": 2, "processes_profiled": 1}
    assert out.absences["cprofile_workers"].startswith("1 of 2 worker processes left no profile")
    assert {(r["process"], r["function"]) for r in out.rows} == {("main", "step"), ("workers", "__getitem__")}
    assert set(out.files) == {"cprofile-main.prof", "cprofile-workers.prof"}
    assert out.meta["window"]["profiled_steps"] == 3 and out.meta["process"] == {"pid": 7, "rank": 0}
