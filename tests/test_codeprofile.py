"""The code-level view: cProfile window and workers, py-spy, the function table, grouping, report."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
import torch
from rich.console import Console
from torch.utils.data import DataLoader, Dataset

from pipeprof.analysis.code_view import CodeView
from pipeprof.analysis.hotspots import (
    GROUPS,
    code_profile,
    file_group,
    group_fractions,
    grouped_functions,
    top_functions,
    window_overhead,
)
from pipeprof.cli.main import build_parser, main
from pipeprof.errors import UsageError
from pipeprof.measure.codeprofile import CodeProfile, CProfileWindow, read_worker_dumps, stats_rows
from pipeprof.measure.pyspy import FILE as PYSPY_FILE
from pipeprof.measure.pyspy import PySpy, locate_pyspy
from pipeprof.pipeline.derive import summarize
from pipeprof.render.console import _code_profile_line, summary_table
from pipeprof.render.html import render_html
from pipeprof.run_folder import FUNCTION_COLUMNS, STEP_COLUMNS, Run, load_run, save_run
from pipeprof.scenario import load_scenario

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def row(function, file="~", line=0, caller=None, tottime_s=0.0, cumtime_s=None, calls=1, process="main"):
    c_file, c_line, c_name = caller if caller else (None, None, None)
    return {"process": process, "file": file, "line": line, "function": function, "caller_file": c_file,
            "caller_line": c_line, "caller_function": c_name, "calls": calls, "primitive_calls": calls,
            "tottime_s": tottime_s, "cumtime_s": tottime_s if cumtime_s is None else cumtime_s}


LINEAR_FWD = (f"{SITE}/torch/nn/modules/linear.py", 124, "forward")
COLLATE = (f"{SITE}/torch/utils/data/_utils/collate.py", 246, "collate_tensor_fn")
THROTTLE = ("/repo/pipeprof/storage/throttle.py", 40, "wait")
SELECTORS = (f"{STDLIB}/selectors.py", 402, "select")
CONN_RECV = (f"{STDLIB}/multiprocessing/connection.py", 390, "_recv")
QUEUE_GET = (f"{STDLIB}/multiprocessing/queues.py", 103, "get")
TRY_GET = (f"{SITE}/torch/utils/data/dataloader.py", 1270, "_try_get_data")
STEP_FN = ("/repo/pipeprof/workload/step.py", 30, "step")


def table(*rows):
    return pd.DataFrame(list(rows), columns=FUNCTION_COLUMNS)


def groups_of(df, process="main"):
    g = grouped_functions(df, process)
    return {(f, fn): grp for f, fn, grp in zip(g["file"], g["function"], g["group"])}


# -- grouping -------------------------------------------------------------------------------


def test_files_decide_their_group_and_the_rest_is_neutral():
    assert file_group(f"{SITE}/torch/utils/data/_utils/pin_memory.py") == "transfer"
    assert file_group(f"{SITE}/torch/utils/data/dataloader.py") == "loading"
    assert file_group("/repo/pipeprof/storage/images.py") == "loading"
    assert file_group(f"{SITE}/PIL/PngImagePlugin.py") == "loading"
    assert file_group(f"{SITE}/torchvision/transforms/v2/_geometry.py") == "loading"
    assert file_group(f"{SITE}/torch/optim/sgd.py") == "compute"
    assert file_group(f"{SITE}/torch/functional.py") == "compute"
    assert file_group("/repo/pipeprof/measure/steps.py") == "other"
    assert file_group(f"{SITE}/torch/_tensor.py") is None  # backward and pickling: by caller
    assert file_group(f"{STDLIB}/threading.py") is None
    assert file_group("~") is None


def test_builtins_and_library_code_count_where_they_were_called_from():
    df = table(
        row("<built-in method torch._C._nn.linear>", caller=LINEAR_FWD, tottime_s=0.5),
        row("forward", *LINEAR_FWD[:2], caller=STEP_FN, tottime_s=0.01, cumtime_s=0.51),
        row("step", *STEP_FN[:2], tottime_s=0.01, cumtime_s=0.6),
        row("<built-in method torch.stack>", caller=COLLATE, tottime_s=0.2),
        row("<built-in method time.sleep>", caller=THROTTLE, tottime_s=0.3),  # emulated storage latency
        row("<method 'poll' of 'select.poll' objects>", caller=SELECTORS, tottime_s=0.4),
        row("select", *SELECTORS[:2], caller=CONN_RECV, tottime_s=0.0, cumtime_s=0.4),
        # posix.read under connection.py under queues.py under the DataLoader: loading, found through the chain
        row("<built-in method posix.read>", caller=CONN_RECV, tottime_s=0.1),
        row("_recv", *CONN_RECV[:2], caller=QUEUE_GET, tottime_s=0.01, cumtime_s=0.51),
        row("get", *QUEUE_GET[:2], caller=TRY_GET, tottime_s=0.01, cumtime_s=0.52),
        row("<method 'to' of 'torch._C.TensorBase' objects>", tottime_s=0.05),  # called by the loop itself
        row("<built-in method builtins.next>", tottime_s=0.001, cumtime_s=0.6),
        row("<built-in method builtins.len>", tottime_s=0.001),
    )
    g = groups_of(df)
    assert g[("~", "<built-in method torch._C._nn.linear>")] == "compute"
    assert g[("~", "<built-in method torch.stack>")] == "loading"
    assert g[("~", "<built-in method time.sleep>")] == "loading"
    assert g[("~", "<method 'poll' of 'select.poll' objects>")] == "waiting"
    assert g[("~", "<built-in method posix.read>")] == "loading"
    assert g[(SELECTORS[0], "select")] == "loading"  # its own (zero) self time goes where it was called from
    assert g[("~", "<method 'to' of 'torch._C.TensorBase' objects>")] == "transfer"
    assert g[("~", "<built-in method builtins.next>")] == "loading"
    assert g[("~", "<built-in method builtins.len>")] == "other"


def test_shares_are_disjoint_self_time_and_sum_to_one():
    df = table(
        row("<built-in method torch._C._nn.linear>", caller=LINEAR_FWD, tottime_s=0.6),
        row("<built-in method torch.stack>", caller=COLLATE, tottime_s=0.3),
        row("<built-in method torch.stack>", caller=LINEAR_FWD, tottime_s=0.1),  # same built-in, two callers
    )
    grouped = grouped_functions(df, "main")
    fractions = group_fractions(grouped)
    assert set(fractions) == set(GROUPS) and sum(fractions.values()) == pytest.approx(1.0)
    assert fractions["compute"] == pytest.approx(0.7) and fractions["loading"] == pytest.approx(0.3)
    stack = grouped.loc[grouped["function"] == "<built-in method torch.stack>"].iloc[0]
    assert stack["tottime_s"] == pytest.approx(0.4) and stack["group"] == "loading"
    assert stack["loading_s"] == pytest.approx(0.3) and stack["compute_s"] == pytest.approx(0.1)
    top = top_functions(grouped, n=1)
    assert top[0].function == "{built-in method torch._C._nn.linear}" and top[0].share == pytest.approx(0.6)
    assert group_fractions(grouped_functions(df, "workers"))["loading"] != group_fractions(grouped)["loading"]


def test_worker_code_called_from_the_worker_loop_is_loading_and_cycles_end():
    a, b = (f"{STDLIB}/a.py", 1, "a"), (f"{STDLIB}/b.py", 1, "b")
    df = table(
        row("put", *QUEUE_GET[:2], tottime_s=0.2, process="workers"),  # no caller: the worker loop called it
        row("a", *a[:2], caller=b, tottime_s=0.1, process="workers"),
        row("b", *b[:2], caller=a, tottime_s=0.1, process="workers"),
        row("a", *a[:2], caller=b, tottime_s=0.1),
        row("b", *b[:2], caller=a, tottime_s=0.1),
    )
    assert set(groups_of(df, "workers").values()) == {"loading"}
    assert set(groups_of(df, "main").values()) == {"other"}
    chain = [(f"{STDLIB}/m{i}.py", 1, f"f{i}") for i in range(2000)]  # deeper than any recursion limit
    deep = table(*(row(key[2], *key[:2], caller=chain[i + 1], tottime_s=0.001) for i, key in enumerate(chain[:-1])))
    assert set(groups_of(deep).values()) == {"other"}


def test_stats_rows_keep_every_edge_and_the_totals():
    linear = ("~", 0, "<built-in method torch._C._nn.linear>")
    fwd = LINEAR_FWD
    stats = {
        linear: (4, 4, 0.4, 0.4, {fwd: (4, 4, 0.4, 0.4)}),
        fwd: (5, 5, 0.05, 0.5, {STEP_FN: (3, 3, 0.03, 0.3)}),  # 2 calls from a frame entered before profiling
    }
    rows = pd.DataFrame(stats_rows(stats, "main"), columns=FUNCTION_COLUMNS)
    fwd_rows = rows[rows["function"] == "forward"]
    assert len(fwd_rows) == 2 and fwd_rows["calls"].sum() == 5
    assert fwd_rows["tottime_s"].sum() == pytest.approx(0.05) and fwd_rows["cumtime_s"].sum() == pytest.approx(0.5)
    assert fwd_rows["caller_file"].isna().sum() == 1
    assert len(rows[rows["function"] == linear[2]]) == 1


# -- the window and its cost ----------------------------------------------------------------------


class FakeProfiler:
    def __init__(self, refuse=False):
        self.calls, self.refuse, self.stats = [], refuse, {}

    def enable(self):
        if self.refuse:
            raise ValueError("Another profiling tool is already active")
        self.calls.append("enable")

    def disable(self):
        self.calls.append("disable")

    def create_stats(self):
        pass


def test_window_covers_exactly_the_steps_after_warmup():
    fake = FakeProfiler()
    window = CProfileWindow(3, 4, lambda: fake)
    on = []
    for i in range(10):
        window.before_step(i)
        on.append(window._on)
    assert on == [False] * 3 + [True] * 4 + [False] * 3
    assert fake.calls == ["enable", "disable"] and window.profiled_steps == 4


def test_window_closes_when_the_run_ends_early_and_never_opens_at_zero():
    fake = FakeProfiler()
    window = CProfileWindow(2, 50, lambda: fake)
    for i in range(5):
        window.before_step(i)
    window.stats()
    assert fake.calls == ["enable", "disable"] and window.profiled_steps == 3
    fake = FakeProfiler()
    window = CProfileWindow(2, 0, lambda: fake)
    for i in range(5):
        window.before_step(i)
    assert fake.calls == []


def test_a_refused_profiler_is_recorded_not_raised():
    profile = CodeProfile(1, 3, None, profiler_factory=lambda: FakeProfiler(refuse=True))
    for i in range(5):
        profile.before_step(i)
    out = profile.finish()
    assert "already active" in out.absences["cprofile"] and out.rows == []
    assert "no DataLoader" in out.meta["workers"]["absent"]


def steps_table(step_s, warmup=2):
    starts = np.concatenate([[0.0], np.cumsum(step_s)[:-1]])  # each step begins as the one before it ends
    return pd.DataFrame([{"step": i, "epoch": 0, "warmup": i < warmup, "t_start_s": starts[i], "data_wait_s": 0.0,
                          "h2d_s": 0.0, "compute_s": s, "step_s": s, "host_wait_s": 0.0, "samples": 8,
                          "loss": 1.0, "correct": 1, "ready_batches": np.nan} for i, s in enumerate(step_s)],
                        columns=STEP_COLUMNS)


def test_overhead_is_the_median_profiled_step_over_the_unprofiled_ones():
    steps = steps_table([9.0, 9.0] + [0.015] * 4 + [0.010] * 10)
    overhead = window_overhead(steps, first_step=2, window_steps=4)
    assert overhead.ratio == pytest.approx(1.5) and overhead.slowdown_fraction == pytest.approx(0.5)
    assert overhead.steps_in_window == 4 and overhead.steps_outside == 10
    assert "no unprofiled steps" in (window_overhead(steps, 2, 50).absent or "")


def test_too_few_steps_outside_the_window_are_not_compared():
    # 5 steps after a 40-step window were the queue's drained tail: "profiled steps x90.19 the others".
    steps = steps_table([9.0, 9.0] + [0.9] * 40 + [0.01] * 5)
    overhead = window_overhead(steps, first_step=2, window_steps=40)
    assert overhead.ratio is None and "ratio" not in overhead.to_json()
    assert (overhead.absent or "").startswith("too few steps outside the window to compare")
    assert overhead.steps_outside == 5
    line = _code_profile_line(CodeView.from_json({"cprofile": {"processes": {}, "overhead": overhead.to_json()},
                                                  "pyspy": {}}))
    assert line is not None and "too few steps outside the window to compare (5)" in line and "×" not in line


def test_in_a_worker_an_nn_module_transform_is_loading_not_compute():
    # A dataset's nn.Module transform (spin() under torch/nn's _call_impl) in a worker, which runs no model.
    module_call = (f"{SITE}/torch/nn/modules/module.py", 1, "_call_impl")
    spin = ("/home/me/train.py", 10, "spin")
    df = table(
        row("spin", *spin[:2], caller=module_call, tottime_s=0.3, process="workers"),
        row("_call_impl", *module_call[:2], caller=("/home/me/train.py", 20, "__getitem__"), tottime_s=0.01,
            process="workers"),
        row("<built-in method torch._C._nn.linear>", caller=LINEAR_FWD, tottime_s=0.2, process="workers"),
        row("spin", *spin[:2], caller=module_call, tottime_s=0.3),
    )
    assert set(groups_of(df, "workers").values()) == {"loading"}
    assert groups_of(df, "main")[(spin[0], "spin")] == "compute"  # in the training process it is the model's
    assert group_fractions(grouped_functions(df, "workers"))["compute"] == 0.0


# -- workers ----------------------------------------------------------------------------------


class Squares(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.full((3,), float(i * i))


class KillFirst(Squares):
    def __getitem__(self, i):
        os.kill(os.getpid(), signal.SIGKILL)


class MarkInit:
    def __init__(self, folder):
        self.folder = folder

    def __call__(self, worker_id):
        (self.folder / f"init-{os.getpid()}").touch()


def epochs(loader, n=2):
    for _ in range(n):
        for _ in loader:
            pass


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_are_profiled_for_their_whole_life_and_merged(tmp_path, persistent):
    loader = DataLoader(Squares(), batch_size=4, num_workers=1, persistent_workers=persistent,
                        worker_init_fn=MarkInit(tmp_path))
    profile = CodeProfile(0, 1, loader)
    profile.before_step(0)
    epochs(loader)
    profile.before_step(1)
    out = profile.finish()
    assert len(list(tmp_path.glob("init-*"))) == (1 if persistent else 2)  # the existing init still runs
    assert out.meta["workers"]["processes_started"] == out.meta["workers"]["processes_profiled"]
    assert "cprofile_workers" not in out.absences and loader.worker_init_fn.__class__ is MarkInit
    workers = pd.DataFrame(out.rows, columns=FUNCTION_COLUMNS).query("process == 'workers'")
    getitem = workers[workers["function"] == "__getitem__"]
    assert getitem["calls"].sum() == 48  # 24 samples, two epochs, every worker merged
    assert set(out.files) == {"cprofile-main.prof", "cprofile-workers.prof"}


def test_a_killed_worker_is_recorded_as_missing(tmp_path):
    loader = DataLoader(KillFirst(), batch_size=4, num_workers=1)
    profile = CodeProfile(0, 1, loader)
    profile.before_step(0)
    with pytest.raises(RuntimeError):
        epochs(loader, 1)
    out = profile.finish()
    assert "1 of 1 worker processes left no profile" in out.absences["cprofile_workers"]
    assert out.meta["workers"]["absent"] == "no worker process left a profile"


def test_unreadable_dumps_count_as_missing(tmp_path):
    (tmp_path / "started-1-a").touch()
    (tmp_path / "started-2-b").touch()
    (tmp_path / "worker-2-b.prof").write_bytes(b"\x00garbage")
    stats, started, readable = read_worker_dumps(tmp_path)
    assert (stats, started, readable) == ({}, 2, 0)


# -- py-spy -----------------------------------------------------------------------------------


def fake_pyspy(tmp_path, monkeypatch, body):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "py-spy"
    script.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")  # found before any real one
    return script


def test_pyspy_absent_is_a_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert locate_pyspy() is None
    out = PySpy(20).start(os.getpid()).stop()
    assert "py-spy is not installed" in out.absences["pyspy"] and out.files == {}


def test_pyspy_refused_is_a_reason(tmp_path, monkeypatch):
    fake_pyspy(tmp_path, monkeypatch, """\
        echo "Permission Denied: Try running again with elevated permissions" >&2
        exit 1
        """)
    spy = PySpy(20).start(os.getpid())
    spy._proc.wait(10)  # training would have taken longer than this
    out = spy.stop()
    assert "exited during training with status 1" in out.absences["pyspy"]
    assert "Permission Denied" in out.absences["pyspy"] and out.files == {}


@pytest.mark.parametrize("body,needle", [
    ("trap 'exit 0' INT", "wrote no speedscope file"),
    ("", "the run ended while it was still attaching"),  # SIGINT's default action: py-spy had not attached yet
    ("trap '' INT", "was killed"),
    ('out="${11}"; trap \'printf "{not json" > "$out"; exit 0\' INT', "not valid JSON"),
    ('out="${11}"; trap \'printf \'"\'"\'{"profiles": [{"samples": []}]}\'"\'"\' > "$out"; exit 0\' INT',
     "recorded no samples"),
])
def test_pyspy_that_writes_nothing_usable_is_a_reason(tmp_path, monkeypatch, body, needle):
    script = fake_pyspy(tmp_path, monkeypatch, body + '\ntouch "$0.ready"\nwhile true; do sleep 0.05; done\n')
    spy = PySpy(20, stop_timeout_s=1).start(os.getpid())
    for _ in range(200):  # until its SIGINT trap is set, as it would be after any real training
        if script.with_suffix(".ready").exists():
            break
        time.sleep(0.02)
    out = spy.stop()
    assert needle in out.absences["pyspy"] and out.files == {}


@pytest.mark.skipif(locate_pyspy() is None, reason="py-spy is not installed (pip install 'pipeprof[pyspy]')")
def test_real_pyspy_records_this_process():
    spy = PySpy(50).start(os.getpid())
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:  # work for it to sample
        sum(range(1000))
    out = spy.stop()
    assert "pyspy" not in out.absences, out.absences
    data = json.loads(out.files[PYSPY_FILE])
    assert data["profiles"] and out.meta["samples"] > 0 and out.meta["rate_hz"] == 50
    assert out.meta["cpu_s"] >= 0 and out.meta["elapsed_s"] >= 1.5  # its own cost, measured while it ran


# -- scenario keys and flags ------------------------------------------------------------------


@pytest.mark.parametrize("override,needle", [
    ("profile.cprofile_steps=-1", "profile.cprofile_steps = -1 is not allowed: expected an integer >= 0"),
    ("profile.cprofile_steps=1.5", "profile.cprofile_steps = 1.5"),
    ("profile.pyspy_hz=5000", "profile.pyspy_hz = 5000 is not allowed"),
    ("profile.pyspy_hz=true", "profile.pyspy_hz = true"),
    ("profile.cprofile=5", "did you mean profile.cprofile_steps?"),
])
def test_bad_code_profile_keys_are_one_line_errors(override, needle):
    with pytest.raises(UsageError) as info:
        load_scenario("scenarios/quick.toml", [override])
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_flags_are_sugar_for_the_scenario_keys():
    parse = build_parser().parse_args
    assert parse(["run", "s.toml", "--cprofile", "--pyspy"]).overrides == ["profile.cprofile_steps=50",
                                                                           "profile.pyspy_hz=20"]
    args = parse(["run", "s.toml", "--set", "profile.pyspy_hz=5", "--pyspy", "100", "--cprofile", "7"])
    assert args.overrides == ["profile.pyspy_hz=5", "profile.pyspy_hz=100", "profile.cprofile_steps=7"]
    scenario = load_scenario("scenarios/quick.toml", args.overrides)
    assert (scenario.profile.cprofile_steps, scenario.profile.pyspy_hz) == (7, 100)
    assert parse(["run", "s.toml"]).overrides == []  # the parser's default list was not touched
    with pytest.raises(UsageError, match="--cprofile: invalid int value"):
        parse(["run", "s.toml", "--cprofile", "x"])


# -- run folder, summary, report --------------------------------------------------------------


def test_old_run_folders_load_with_no_code_profile(tmp_path):
    folder = save_run(Run(meta={}, steps=steps_table([0.01] * 4)), tmp_path / "r")
    (folder / "functions.csv").unlink()
    run = load_run(folder)
    assert run.functions.empty and list(run.functions.columns) == FUNCTION_COLUMNS and run.attachments == {}
    code = summarize(run)["code_profile"]
    assert code["cprofile"]["absent"].startswith("off") and code["pyspy"]["absent"].startswith("off")
    assert "code-profile" not in render_html(run, summarize(run))
    with pytest.raises(ValueError, match="unknown attachment"):
        save_run(Run(meta={}, steps=run.steps, attachments={"x.bin": b""}), tmp_path / "bad")


XSS = "<script>alert(1)</script>"


def test_report_shows_the_view_escaped_with_the_missing_parts_as_notes(tmp_path):
    functions = table(row("<built-in method torch._C._nn.linear>", caller=LINEAR_FWD, tottime_s=0.6),
                      row(XSS, "/x/evil.py", 3, caller=COLLATE, tottime_s=0.2))
    meta = {"scenario": {"name": "t"}, "absences": {"pyspy": "py-spy exited with status 1: " + XSS},
            "code_profile": {"cprofile": {"window": {"first_step": 2, "steps": 4, "profiled_steps": 4},
                                          "workers": {"absent": "num_workers = 0: no workers"},
                                          "files": {"main": "cprofile-main.prof"}},
                             "pyspy": {"rate_hz": 20, "absent": "py-spy exited with status 1: " + XSS}}}
    run = Run(meta=meta, steps=steps_table([1.0, 1.0] + [0.02] * 4 + [0.01] * 10), functions=functions,
              attachments={"cprofile-main.prof": b"x"})
    folder = save_run(run, tmp_path / "r")
    loaded = load_run(folder)
    assert loaded.attachments == {"cprofile-main.prof": b"x"}
    summary = summarize(loaded)
    assert summary["code_profile"] == code_profile(run).to_json()
    cp = summary["code_profile"]["cprofile"]
    assert cp["overhead"]["ratio"] == pytest.approx(2.0)
    assert cp["processes"]["main"]["groups"]["compute"] == pytest.approx(0.75)
    assert cp["processes"]["workers"]["absent"] == "num_workers = 0: no workers"
    html = render_html(loaded, summary)
    section = html[html.index('id="code-profile"'):]
    assert XSS not in html and "&lt;script&gt;" in section
    assert "{built-in method torch._C._nn.linear}" in section and "×2.00" in section
    assert "not recorded: py-spy exited with status 1" in section and 'href="cprofile-main.prof"' in section
    assert html.index('id="code-profile"') < html.index("<h2>Scenario</h2>")
    console = Console(record=True, width=300)
    console.print(summary_table(summary, folder))
    text = console.export_text()
    assert "main: compute 75.0%" in text and "py-spy exited" in text


# -- a small real run -------------------------------------------------------------------------

TINY = """
name = "tiny-code"
[data]
storage = "ram"
samples = 1000
[loader]
batch_size = 50
num_workers = 1
[model]
hidden = [32]
[train]
epochs = 1
warmup_steps = 3
device = "cpu"
[profile]
sample_hz = 20
"""


@pytest.mark.integration
def test_a_real_run_profiles_compute_in_main_and_loading_in_the_workers(tmp_path):
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out = tmp_path / "reports"
    status = main(["run", str(scenario), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet",
                   "--cprofile", "6", "--pyspy",  # 17 counted steps: 11 outside the window, enough to compare
                   "--set", "profile.what_ifs=false"])  # the code-level view is the subject, not the probes
    assert status == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
    summary = json.loads((folder / "summary.json").read_text())
    cp = summary["code_profile"]["cprofile"]
    assert cp["window"] == {"first_step": 3, "steps": 6, "profiled_steps": 6}
    assert cp["overhead"]["steps_in_window"] == 6 and cp["overhead"]["ratio"] > 0
    main_groups = {t.name: t.group for t in grouped_top(folder, "main")}
    assert main_groups.get("<built-in method torch._C._nn.linear>") == "compute"
    assert main_groups.get("<method 'run_backward' of 'torch._C._EngineBase' objects>") == "compute"
    worker_groups = {t.name: t.group for t in grouped_top(folder, "workers")}
    assert worker_groups.get("__getitem__") == "loading" and worker_groups.get("fetch") == "loading"
    assert cp["processes"]["workers"]["processes_profiled"] == 1
    for name in ("functions.csv", "cprofile-main.prof", "cprofile-workers.prof"):
        assert (folder / name).is_file(), name
    import pstats

    assert pstats.Stats(str(folder / "cprofile-workers.prof")).total_calls > 0
    pyspy = summary["code_profile"]["pyspy"]
    if locate_pyspy() is None:
        assert "not installed" in pyspy["absent"]
    elif "absent" in pyspy:  # a run of a few seconds can end before py-spy has attached and sampled
        assert pyspy["absent"].startswith("py-spy recorded no samples"), pyspy
        assert not (folder / PYSPY_FILE).exists()
    else:
        assert json.loads((folder / PYSPY_FILE).read_text())["profiles"]
    html = (folder / "report.html").read_text()
    assert 'id="code-profile"' in html and "cprofile-main.prof" in html
    # the view is re-derived from the folder alone
    (folder / "summary.json").unlink()
    assert main(["report", str(folder), "--quiet"]) == 0
    assert json.loads((folder / "summary.json").read_text())["code_profile"] == summary["code_profile"]


def grouped_top(folder, process):
    return top_functions(grouped_functions(load_run(folder).functions, process), n=10_000)
