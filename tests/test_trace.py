"""The Chrome trace export: the event structure, tiling of phases and loading parts, counters, the command."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from pipeprof import __version__
from pipeprof.cli.main import main
from pipeprof.format import MIB
from pipeprof.render.trace import chrome_trace
from pipeprof.run_folder import (
    GPU_SAMPLE_COLUMNS,
    LOADING_COLUMNS,
    PROCESS_COLUMNS,
    SAMPLE_COLUMNS,
    STEP_COLUMNS,
    Run,
    save_run,
)

MAIN_PID = 4000


def make_steps(n=4, warmup=1):
    """Steps of 0.1 s from t = 1 s: 30 ms data wait, 5 ms copy, 50 ms compute, 15 ms other."""
    return pd.DataFrame([{"step": i, "epoch": 0, "warmup": i < warmup, "t_start_s": 1.0 + 0.1 * i,
                          "data_wait_s": 0.03, "h2d_s": 0.005, "compute_s": 0.05, "step_s": 0.1,
                          "host_wait_s": 0.03, "samples": 32, "loss": 2.0, "correct": 3, "ready_batches": np.nan}
                         for i in range(n)], columns=STEP_COLUMNS)


def make_loading(workers=(0, 1), n=4):
    """A batch per step, workers taking turns; fetch and prep are sums over samples (they exceed the span)."""
    rows = []
    for b in range(n):
        w = workers[b % len(workers)]
        rows.append({"batch": b, "step": b, "worker": w, "pid": MAIN_PID if w < 0 else 5000 + w,
                     "t_start_s": 0.95 + 0.1 * b, "t_end_s": 1.03 + 0.1 * b, "fetch_s": 0.06, "prep_s": 0.03,
                     "collate_s": 0.01, "samples": 32, "nbytes": 1000, "fetch_max_s": 0.004})
    return pd.DataFrame(rows, columns=LOADING_COLUMNS)


def make_samples(gpu=False):
    df = pd.DataFrame({"t_s": [1.0, 1.1, 1.2], "cpu_util_pct": [50.0, np.nan, 70.0],
                       "main_cpu_pct": [90.0, 95.0, np.nan], "workers_cpu_pct": [120.0, 130.0, np.nan],
                       "main_rss_bytes": [512 * 2**20] * 3, "workers_rss_bytes": [256 * 2**20] * 3,
                       "tree_rss_bytes": [768 * 2**20] * 3, "workers": [2] * 3,
                       "read_bytes_per_s": [np.nan] * 3})[SAMPLE_COLUMNS]
    if gpu:
        df["gpu_util_pct"], df["gpu_mem_used_bytes"] = [40.0, 50.0, np.nan], [2**30] * 3
        df["pcie_rx_bytes_per_s"], df["pcie_tx_bytes_per_s"] = [2000 * MIB, 1000 * MIB, np.nan], [MIB, np.nan, np.nan]
    return df


def make_run(steps=None, loading=None, samples=None, gpu=False):
    processes = pd.DataFrame([(1.0, MAIN_PID, "main", 90.0, 1, 0, np.nan), (1.0, 5000, "worker", 60.0, 1, 0, np.nan)],
                             columns=PROCESS_COLUMNS)
    return Run(meta={"scenario": {"name": "tr"}, "status": "complete", "device": "cpu"},
               steps=make_steps() if steps is None else steps, processes=processes,
               loading=make_loading() if loading is None else loading,
               samples=make_samples(gpu) if samples is None else samples)


def empty_run():
    return Run(meta={}, steps=pd.DataFrame(columns=STEP_COLUMNS))


def events(trace, ph=None, name=None, pid=None, tid=None):
    return [e for e in trace["traceEvents"] if (ph is None or e["ph"] == ph) and (name is None or e["name"] == name)
            and (pid is None or e["pid"] == pid) and (tid is None or e["tid"] == tid)]


def thread_of(trace, pid, thread_name):
    [meta] = [e for e in events(trace, "M", "thread_name", pid=pid) if e["args"]["name"] == thread_name]
    return meta["tid"]


@pytest.mark.parametrize("run", [make_run(), make_run(gpu=True), empty_run()], ids=["cpu", "gpu", "empty"])
def test_every_event_is_well_formed_and_the_trace_is_strict_json(run):
    trace = chrome_trace(run)
    assert trace["displayTimeUnit"] == "ms" and trace["metadata"]["pipeprof_version"] == __version__
    assert "microseconds" in trace["metadata"]["time_origin"]
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "C", "M")
        assert type(e["pid"]) is int and type(e["tid"]) is int and isinstance(e["ts"], (int, float))
        assert isinstance(e["args"], dict)
        if e["ph"] == "X":
            assert isinstance(e["cat"], str) and isinstance(e["dur"], float) and e["dur"] >= 0
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, float) for v in e["args"].values())
    assert json.loads(json.dumps(trace, allow_nan=False)) == trace


def test_an_empty_run_gives_metadata_and_no_slices():
    trace = chrome_trace(empty_run())
    assert not events(trace, "X") and not events(trace, "C")
    assert [e["args"]["name"] for e in events(trace, "M", "process_name")] == ["training process"]
    assert events(trace, "M", "process_name")[0]["pid"] == 1  # no processes.csv: pid 1


def test_steps_are_microseconds_of_their_seconds_with_warmup_apart():
    trace = chrome_trace(make_run())
    tid = thread_of(trace, MAIN_PID, "steps")
    steps = sorted(events(trace, "X", pid=MAIN_PID, tid=tid), key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == ["step 0", "step 1", "step 2", "step 3"]
    assert [e["cat"] for e in steps] == ["warmup", "step", "step", "step"]
    assert steps[1]["ts"] == pytest.approx(1.1e6) and steps[1]["dur"] == pytest.approx(0.1e6)
    assert steps[1]["args"] == {"epoch": 0, "warmup": False, "samples": 32, "data_wait_s": 0.03, "h2d_s": 0.005,
                                "compute_s": 0.05, "step_s": 0.1}
    assert trace["metadata"]["run"] == "tr" and trace["metadata"]["status"] == "complete"


def test_the_phases_of_a_step_tile_it():
    trace = chrome_trace(make_run())
    phases = events(trace, "X", pid=MAIN_PID, tid=thread_of(trace, MAIN_PID, "phases"))
    for step in events(trace, "X", pid=MAIN_PID, tid=thread_of(trace, MAIN_PID, "steps")):
        mine = sorted((p for p in phases if step["ts"] <= p["ts"] < step["ts"] + step["dur"]), key=lambda p: p["ts"])
        assert [p["name"] for p in mine] == ["data wait", "host→device", "compute", "other"]
        assert mine[0]["ts"] == step["ts"] and {p["cat"] for p in mine} == {step["cat"]}
        for a, b in itertools.pairwise(mine):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=1e-3)
        assert mine[-1]["ts"] + mine[-1]["dur"] == pytest.approx(step["ts"] + step["dur"], abs=1e-3)
        assert [p["dur"] for p in mine] == pytest.approx([30e3, 5e3, 50e3, 15e3], abs=1e-3)


def test_a_step_longer_than_the_gap_to_the_next_is_drawn_up_to_it_with_its_phases_inside():
    steps = make_steps(n=2, warmup=0)
    steps.loc[0, ["compute_s", "step_s"]] = [0.2, 0.3]  # device time running past the next step's host start
    trace = chrome_trace(make_run(steps=steps))
    first = events(trace, "X", "step 0")[0]
    assert first["dur"] == pytest.approx(0.1e6) and first["args"]["step_s"] == 0.3
    phases = events(trace, "X", pid=MAIN_PID, tid=thread_of(trace, MAIN_PID, "phases"))
    assert max(p["ts"] + p["dur"] for p in phases if p["ts"] < 1.1e6) == pytest.approx(1.1e6, abs=1e-3)
    assert [p["name"] for p in phases if p["ts"] < 1.1e6] == ["data wait", "host→device", "compute"]


def test_fetch_prep_collate_fill_each_batch_in_proportion():
    trace = chrome_trace(make_run())
    batches = [e for e in events(trace, "X") if e["name"].startswith("batch")]
    assert len(batches) == 4
    for batch in batches:
        parts = sorted((e for e in events(trace, "X", pid=batch["pid"], tid=batch["tid"])
                        if e["name"] in ("fetch", "prep", "collate")
                        and batch["ts"] <= e["ts"] < batch["ts"] + batch["dur"]), key=lambda e: e["ts"])
        assert [p["name"] for p in parts] == ["fetch", "prep", "collate"]
        assert parts[0]["ts"] == batch["ts"] and batch["dur"] == pytest.approx(80e3)
        for a, b in itertools.pairwise(parts):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=1e-3)
        assert parts[-1]["ts"] + parts[-1]["dur"] == pytest.approx(batch["ts"] + batch["dur"], abs=1e-3)
        assert [p["dur"] for p in parts] == pytest.approx([48e3, 24e3, 8e3], abs=1e-3)  # 6 : 3 : 1 of 80 ms
        assert batch["args"] == {"fetch_s": 0.06, "prep_s": 0.03, "collate_s": 0.01, "samples": 32,
                                 "step": int(batch["name"].split()[1])}


def test_workers_are_their_own_processes_and_main_made_batches_a_thread_of_the_training_process():
    trace = chrome_trace(make_run(loading=make_loading(workers=(0, 1, -1))))
    names = {e["pid"]: e["args"]["name"] for e in events(trace, "M", "process_name")}
    assert names == {MAIN_PID: "training process", 5000: "DataLoader worker 0", 5001: "DataLoader worker 1"}
    assert {e["name"] for e in events(trace, "X", pid=5000)} == {"batch 0", "batch 3", "fetch", "prep", "collate"}
    loading_main = thread_of(trace, MAIN_PID, "loading (main)")
    assert {e["name"] for e in events(trace, "X", pid=MAIN_PID, tid=loading_main)} == {"batch 2", "fetch", "prep",
                                                                                      "collate"}


def test_a_worker_without_a_recorded_pid_gets_one_of_its_own():
    loading = make_loading(workers=(0, 1))
    loading["pid"] = np.nan
    trace = chrome_trace(make_run(loading=loading))
    pids = {e["args"]["name"]: e["pid"] for e in events(trace, "M", "process_name")}
    assert len(set(pids.values())) == 3 and pids["training process"] == MAIN_PID


def test_counters_skip_missing_values_and_never_write_zero_for_them():
    trace = chrome_trace(make_run())
    cpu = events(trace, "C", "CPU (% of all cores)")
    assert [(e["ts"], e["args"]) for e in cpu] == [(1e6, {"machine": 50.0}), (1.2e6, {"machine": 70.0})]
    one_core = events(trace, "C", "CPU (% of one core)")
    assert [e["args"] for e in one_core] == [{"main": 90.0, "workers": 120.0}, {"main": 95.0, "workers": 130.0}]
    assert events(trace, "C", "memory (MiB)")[0]["args"] == {"main": 512.0, "workers": 256.0, "tree": 768.0}
    assert not events(trace, "C", "disk read (MiB/s)")  # all NaN: no track at all
    assert not [e for e in events(trace, "C") if e["name"].startswith(("GPU", "PCIe"))]  # no GPU columns


def test_gpu_counters_when_a_gpu_was_sampled():
    trace = chrome_trace(make_run(gpu=True))
    assert [e["args"] for e in events(trace, "C", "GPU util (%)")] == [{"util": 40.0}, {"util": 50.0}]
    assert events(trace, "C", "GPU memory (MiB)")[0]["args"] == {"used": 1024.0}
    assert [e["args"] for e in events(trace, "C", "PCIe (MiB/s)")] == [{"rx": 2000.0, "tx": 1.0}, {"rx": 1000.0}]
    samples = make_samples(gpu=True)
    samples[GPU_SAMPLE_COLUMNS] = np.nan  # columns present, nothing sampled
    assert not events(chrome_trace(make_run(samples=samples)), "C", "GPU util (%)")


def test_export_writes_trace_json_into_the_run_folder(tmp_path, capsys):
    folder = save_run(make_run(), tmp_path / "r")
    assert main(["export", str(folder), "--format", "chrome-trace"]) == 0
    trace = json.loads((folder / "trace.json").read_text())
    assert events(trace, "X", "step 3") and events(trace, "M", "process_name")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"trace: {folder / 'trace.json'}" and "ui.perfetto.dev" in out[1]


def test_export_to_a_chosen_file(tmp_path):
    folder = save_run(make_run(), tmp_path / "r")
    assert main(["export", str(folder), "--format", "chrome-trace", "--output", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["metadata"]["run"] == "tr"
    assert not (folder / "trace.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left behind


@pytest.mark.parametrize("argv", [["export", "{tmp}/missing", "--format", "chrome-trace"],
                                  ["export", "{run}", "--format", "xml"],
                                  ["export", "{run}", "--format", "chrome-trace", "--output", "{tmp}/no/such/t.json"]],
                         ids=["no-folder", "bad-format", "no-output-folder"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv):
    folder = save_run(make_run(), tmp_path / "r")
    argv = [a.format(tmp=tmp_path, run=folder) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipeprof: error:") and len(err.strip().splitlines()) == 1
    assert not (folder / "trace.json").exists()
