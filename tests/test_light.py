"""profile --light without a run: the windows cut from a real script's events, the event file read by offset and
rotated, the bounded windows file, the change-point test, and the summary and table of a light run folder.

``fixtures/events/attach_target.jsonl`` is the event file the hooks wrote for ``fixtures/attach_target.py
--seconds 6 --collate-ms 20 --compute-ms 5`` (2 workers)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from conftest import schema_errors
from rich.console import Console

from pipeprof.analysis.change_point import change_point
from pipeprof.analysis.summary import summary_from_json
from pipeprof.measure.light import EventTail, LightWindows, RotatingWindows, read_windows, window_aggregate
from pipeprof.pipeline.derive import derived_files, summary_document
from pipeprof.render.console import summary_table
from pipeprof.run_folder import STEP_COLUMNS, Run, load_run, save_run, to_json
from pipeprof.script.event_steps import script_steps

EVENTS = Path(__file__).parent / "fixtures" / "events" / "attach_target.jsonl"


def _events() -> list[list]:
    return [json.loads(line) for line in EVENTS.read_text().splitlines()]


def test_windows_of_a_real_scripts_events_count_every_step_once_and_time_it_as_the_whole_cut():
    events = _events()
    t0_s = events[0][1]
    whole = script_steps(events, t0_s, warmup_steps=5).steps
    cutter = LightWindows(t0_s, warmup_steps=5)
    # the events as they were flushed: in order of writing, cut into 7 arbitrary pieces
    bounds = [0, 40, 300, 301, 900, 1500, 2200, len(events)]
    got = [cutter.steps(events[a:b])[0] for a, b in zip(bounds, bounds[1:])]
    steps = pd.concat(got, ignore_index=True)
    assert len(steps) == len(whole) - 1  # all but the last (it might still have been running)
    assert (steps["t_start_s"].diff().dropna() > 0).all()  # no step twice
    counted = steps[~steps["warmup"].astype(bool)]
    assert len(counted) == (~whole["warmup"]).sum() - 1
    assert counted["step_s"].sum() == pytest.approx(whole[~whole["warmup"]]["step_s"].iloc[:-1].sum(), rel=1e-9)
    assert counted["data_wait_s"].sum() == pytest.approx(whole[~whole["warmup"]]["data_wait_s"].iloc[:-1].sum(),
                                                         rel=1e-6)
    assert cutter.step_source == "optimizer" and cutter.loaders[0]["num_workers"] == 2


def test_event_tail_reads_every_event_once_while_the_hooks_keep_their_file_and_its_disk_stays_bounded(tmp_path):
    """The hooks' own writer (one descriptor kept open, one write a step) and the tail, a read every few steps:
    past ``trim_bytes`` read, the disk under the lines read is given back in place; nothing is lost or read twice,
    and the file's disk stays within a trim of what is unread, however long the job."""
    from pipeprof.measure.file_holes import disk_bytes
    from pipeprof.script.event_file import read_events
    from pipeprof.script.hooks import EventLog

    path = tmp_path / "events.jsonl"
    log = EventLog(str(path), clock=lambda: 0.0)
    log.open()
    tail = EventTail(path, trim_bytes=64 * 1024)
    seen, most_disk = [], 0
    for step in range(50000):  # about 1.1 MB of events: some 17 trims
        log.add(("M", float(step)), 0.0)  # a mark (prof.step()): written as it comes
        if step % 301 == 0:
            seen += tail.read_new()
            most_disk = max(most_disk, disk_bytes(path))
    seen += tail.read_new()
    assert [e[1] for e in seen] == [float(i) for i in range(50000)] and tail.unreadable == 0
    assert tail.untrimmable is None and path.stat().st_size > 1_000_000  # the file's length runs on...
    assert most_disk <= 64 * 1024 + 40 * 1024  # ...its disk does not (a trim, a read's worth of lines, a block)
    # read whole, as a rebuild would: what was given back is neither an event nor damage; the rest is all there
    events = read_events(path)
    marks = events.tables["M"]["t_s"].tolist()
    assert events.unreadable == 0 and 0 < len(marks) < 50000 and marks == [float(i) for i in range(50000 - len(marks), 50000)]


def test_a_reader_of_the_whole_trimmed_file_gets_the_records_given_back_from_the_light_profile(tmp_path):
    """--live beside --light reads the event file whole: once its start (the loaders' records) is given back, the
    light profile's kept records are read ahead of it, so the live view still knows the loader."""
    from pipeprof.script.event_file import read_events
    from pipeprof.script.hooks import EventLog

    loader = ["L", 0, {"number": 0, "name": "loader", "num_workers": 2, "batch_size": 32}]
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(loader) + "\n")
    log = EventLog(str(path), clock=lambda: 0.0)
    tail = EventTail(path, trim_bytes=16 * 1024)
    for step in range(5000):
        log.add(("M", float(step)), 0.0)
    tail.read_new()
    assert tail.trimmed and read_events(path).loaders == {}  # the loader's record was in the part given back
    assert read_events(path, before=[loader]).loaders[0]["num_workers"] == 2


def test_windows_file_stays_under_its_bound_and_keeps_the_newest(tmp_path):
    writer = RotatingWindows(tmp_path, max_bytes=4000)
    for i in range(200):
        writer.write({"t_start_s": float(i), "steps": i, "step_s": {"median": 0.1}})
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    windows, bad = read_windows(tmp_path)
    assert size <= 4000 and bad == 0
    assert windows[-1]["steps"] == 199 and [w["steps"] for w in windows] == list(range(200 - len(windows), 200))


def test_change_point_names_a_slowdown_and_not_noise():
    rng = random.Random(3)
    steady = [0.100 + rng.gauss(0, 0.004) for _ in range(300)]
    assert change_point(steady) is None
    slower = steady[:200] + [0.130 + rng.gauss(0, 0.004) for _ in range(100)]
    cp = change_point(slower)
    assert cp is not None and abs(cp.index - 200) <= 2 and cp.ratio == pytest.approx(1.3, abs=0.02)
    drift = [0.100 * (1 + 0.0001 * i) + rng.gauss(0, 0.002) for i in range(300)]  # 3% over the whole job
    assert change_point(drift) is None
    assert change_point([0.1, 0.2]) is None


def _window(i: int, median: float) -> dict:
    steps = pd.DataFrame([{"step": j, "epoch": 0, "warmup": False, "t_start_s": i * 10 + j * median,
                           "data_wait_s": 0.3 * median, "h2d_s": 0.0, "compute_s": 0.7 * median, "step_s": median,
                           "host_wait_s": 0.0, "samples": 32, "loss": 1.0, "correct": 1, "ready_batches": 1.0,
                           "collective_wait_s": 0.0} for j in range(5)], columns=STEP_COLUMNS)
    loading = pd.DataFrame(columns=["worker", "fetch_s", "prep_s", "collate_s"])
    return window_aggregate(steps, loading, t_start_s=i * 10.0, t_end_s=i * 10.0 + 10)


def test_report_of_a_light_folder_shows_the_timeline_and_names_the_change(tmp_path):
    writer = RotatingWindows(tmp_path / "w")
    (tmp_path / "w").mkdir(exist_ok=True)
    for i in range(30):
        writer.write(_window(i, 0.1 if i < 20 else 0.15))
    run = Run(meta={"kind": "script", "status": "complete", "error": None, "absences": {}, "notes": [],
                    "scenario": {"name": "week"}, "loaders": [], "script": {"command": ["python", "t.py"]},
                    "light": {"window_s": 10.0, "windows": 30}},
              steps=pd.DataFrame(columns=STEP_COLUMNS),
              attachments={"windows.jsonl": (tmp_path / "w" / "windows.jsonl").read_bytes()})
    folder = save_run(run, tmp_path / "run")
    summary, files = derived_files(load_run(folder), folder.name)
    assert schema_errors(json.loads(files["summary.json"])) == []
    assert summary["steps"] == 150 and summary["fractions"]["data_wait"] == pytest.approx(0.3)
    page = files["report.html"]
    chart = page[page.index("The whole job, window by window"):]
    assert chart.index("<svg") < chart.index("change point") < chart.index("×1.5")  # drawn, the change marked
    cp = summary["light"]["change_point"]
    assert cp["index"] == 20 and cp["t_s"] == 200.0 and cp["ratio"] == pytest.approx(1.5)
    console = Console(record=True, width=100, color_system=None)
    console.print(summary_table(summary, folder))
    text = console.export_text()
    assert "▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁██████████ 100 ms–150 ms" in text
    assert "at 3 min 20 s: step time 100 ms → 150 ms (×1.5" in text
    # read back (summary_from_json: the typed sections) and written again, the same summary.json
    assert to_json(summary_document(summary_from_json(json.loads(files["summary.json"])))) == files["summary.json"]


@pytest.mark.integration
def test_the_apis_light_mode_keeps_windows_and_no_step(tmp_path):
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import pipeprof

    loader = DataLoader(TensorDataset(torch.randn(4096, 8)), batch_size=16)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    taken = 0
    with pipeprof.profile("light-api", out=tmp_path, quiet=True, light_s=1.0, sample_hz=2.0) as prof:
        started = time.monotonic()
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(0.01)
            taken += 1
            if time.monotonic() - started > 2.5:
                break
    assert prof.run is not None and prof.run.steps.empty and prof.summary is not None
    assert prof.summary["light"]["windows"] >= 2
    assert taken - 7 <= prof.summary["steps"] <= taken - 5  # warm-up left out, the last one perhaps running


def test_profile_live_shows_the_last_second_of_a_scripts_events_and_refreshes_at_most_once_a_window():
    from types import SimpleNamespace

    from pipeprof.pipeline.live_profile import ProfileLive

    events = _events()
    t0_s = events[0][1]
    steps = script_steps(events, t0_s).steps
    end_s = float(steps["t_start_s"].iloc[-1])
    session = SimpleNamespace(events_path=EVENTS, t0_s=t0_s, warmup_steps=5, sampler=None,
                              absences={"gpu": "no CUDA device"})
    now = [t0_s + end_s]
    shown = []
    live = ProfileLive(session, shown.append, window_s=1.0, clock=lambda: now[0])
    live.tick()
    live.tick()  # the same second: no second frame
    assert len(shown) == 1
    w = shown[0]
    in_window = steps[steps["t_start_s"] >= end_s - 1.0]
    assert w.steps_per_s == pytest.approx(len(in_window)) and len(in_window) > 5
    assert w.data_wait_fraction == pytest.approx(in_window["data_wait_s"].sum() / in_window["step_s"].sum())
    assert w.queue_capacity_batches == 4 and set(w.worker_busy_fraction) == {"0", "1"}
    assert w.absent["gpu"] == "no CUDA device"
    now[0] += 5.0
    live.tick()
    assert len(shown) == 2 and shown[1].steps_per_s is None  # nothing new since: the last second had no step
