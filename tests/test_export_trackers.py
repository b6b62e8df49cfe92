"""pipeprof export --format tensorboard / mlflow / wandb: the series from committed and hand-made runs, and round
trips through each tracker's own reader (TensorBoard's EventAccumulator, MLflow's client) against steps.csv."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_compare import fake_run

from pipeprof.analysis.summary import summary_record
from pipeprof.cli.main import main
from pipeprof.export.series import export_series
from pipeprof.export.text import export_texts
from pipeprof.pipeline.derive import summarize
from pipeprof.run_folder import LOADING_COLUMNS, PROCESS_COLUMNS, load_run

RUNS = Path(__file__).parent / "fixtures" / "runs"
WORKERS = RUNS / "scenario-memmap-workers-cprofile"  # 2 workers, prefetch queue observed
PLAIN = RUNS / "script-plain-loop"  # a script loading in the training process, queue not observable


def _by_tag(points, tag):
    rows = points[points["tag"] == tag]
    return dict(zip(rows["step"], rows["value"]))


# ---- the series ------------------------------------------------------------------------------------------

def test_step_series_are_steps_csv_in_ms():
    steps = pd.read_csv(WORKERS / "steps.csv")
    points = export_series(load_run(WORKERS)).points
    wait = _by_tag(points, "step/data_wait_ms")
    assert list(wait) == steps["step"].tolist()  # every step, warm-up included
    assert list(wait.values()) == pytest.approx((1000 * steps["data_wait_s"]).tolist())
    other = steps["step_s"] - steps["data_wait_s"] - steps["h2d_s"] - steps["compute_s"]
    assert list(_by_tag(points, "step/other_ms").values()) == pytest.approx((1000 * other.clip(lower=0)).tolist())
    assert list(_by_tag(points, "step/samples_per_s").values()) == pytest.approx(
        (steps["samples"] / steps["step_s"]).tolist())
    queue = _by_tag(points, "step/prefetch_queue_batches")
    assert queue == pytest.approx(steps.dropna(subset=["ready_batches"]).set_index("step")["ready_batches"].to_dict())
    assert 0 not in queue  # the first step has no reading: absent, never 0


def test_window_series_follow_the_summarys_throughput_windows():
    run = load_run(WORKERS)
    series = export_series(run)
    windows = _by_tag(series.points, "window/samples_per_s")
    assert list(windows.values()) == pytest.approx(summarize(run)["throughput"]["per_window_samples_per_s"])
    busy = {t for t in series.tags() if t.endswith("busy_share")}
    assert busy == {"worker/0/busy_share", "worker/1/busy_share"}
    assert all(0 <= v <= 1 for t in busy for v in _by_tag(series.points, t).values())
    assert ("gpu", "no GPU was sampled in this run") in series.absent
    assert not any(t.startswith("gpu/") for t in series.tags())


def test_absences_are_said_not_zeros():
    series = export_series(load_run(PLAIN))
    assert "step/prefetch_queue_batches" not in series.tags()
    assert dict(series.absent)["step/prefetch_queue_batches"].startswith("the prefetch queue was not observable")
    short = export_series(fake_run("q", 0.01, n=8))  # 3 counted steps: no windows
    assert not any(t.startswith("window/") for t in short.tags())
    assert "window" in dict(short.absent)


def test_a_workers_busy_share_cpu_and_memory_in_a_hand_made_window():
    run = fake_run("q", 0.1, n=45)  # 40 counted steps of about 0.1 s: 4 windows of about 1 s
    t0, t1 = run.steps["t_start_s"].iloc[5], run.steps["t_start_s"].iloc[44] + run.steps["step_s"].iloc[44]
    # worker 0 makes a batch for the first 30% of every 0.1 s; worker 1 is never busy after warm-up
    starts = np.arange(0.0, 4.5, 0.1)
    run.loading = pd.DataFrame({"batch": range(len(starts)), "step": range(len(starts)), "worker": 0, "pid": 70,
                                "t_start_s": starts, "t_end_s": starts + 0.03}, columns=LOADING_COLUMNS)
    run.loading.loc[len(run.loading)] = {"batch": 99, "step": 0, "worker": 1, "pid": 71, "t_start_s": 0.0,
                                         "t_end_s": 0.01}
    ticks = np.arange(0.05, 4.5, 0.1)
    run.processes = pd.concat([
        pd.DataFrame({"t_s": ticks, "pid": 70, "role": "worker", "cpu_pct": 30.0, "rss_bytes": 2 * 1024**2},
                     columns=PROCESS_COLUMNS),
        pd.DataFrame({"t_s": ticks, "pid": 1, "role": "main", "cpu_pct": 90.0, "rss_bytes": 8 * 1024**2},
                     columns=PROCESS_COLUMNS)], ignore_index=True)
    points = export_series(run).points
    busy0, busy1 = _by_tag(points, "worker/0/busy_share"), _by_tag(points, "worker/1/busy_share")
    assert len(busy0) == 4 and list(busy0.values()) == pytest.approx([0.3] * 4, abs=0.02)
    assert list(busy1.values()) == [0.0] * 4
    assert list(_by_tag(points, "worker/0/cpu_pct").values()) == pytest.approx([30.0] * 4)
    assert list(_by_tag(points, "worker/0/rss_mib").values()) == pytest.approx([2.0] * 4)
    assert list(_by_tag(points, "main/cpu_pct").values()) == pytest.approx([90.0] * 4)
    assert max(busy0) == 44 and t1 > t0  # the last window ends at the last step


def test_texts_say_the_verdict_the_top_recommendations_and_the_absences():
    run = load_run(WORKERS)
    s = summarize(run)
    texts = export_texts(summary_record(run), export_series(run))
    assert s["verdict"]["sentence"] in texts["pipeprof/verdict"]
    assert texts["pipeprof/recommendations"].startswith("1. `")
    assert texts["pipeprof/recommendations"].count("\n") == min(3, len(s["recommendations"])) - 1
    assert "gpu: no GPU was sampled" in texts["pipeprof/absent"]


# ---- TensorBoard, for real -------------------------------------------------------------------------------

def _accumulator(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def test_tensorboard_round_trip_matches_steps_csv(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="the tensorboard extra (in the test extra) is not installed")
    assert main(["export", str(WORKERS), "--format", "tensorboard", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    log_dir = tmp_path / WORKERS.name
    assert f"tensorboard: {log_dir}" in out and "not exported: gpu" in out
    ea = _accumulator(log_dir)
    steps = pd.read_csv(WORKERS / "steps.csv")
    for tag, column in (("step/data_wait_ms", "data_wait_s"), ("step/h2d_ms", "h2d_s"),
                        ("step/compute_ms", "compute_s")):
        events = ea.Scalars(tag)
        assert [e.step for e in events] == steps["step"].tolist()
        assert [e.value for e in events] == pytest.approx((1000 * steps[column]).tolist(), rel=1e-6)  # float32
    rates = [e.value for e in ea.Scalars("step/samples_per_s")]
    assert rates == pytest.approx((steps["samples"] / steps["step_s"]).tolist(), rel=1e-6)
    assert {"worker/0/busy_share", "window/samples_per_s", "step/prefetch_queue_batches"} <= set(ea.Tags()["scalars"])
    verdict = ea.Tensors("pipeprof/verdict/text_summary")[0].tensor_proto.string_val[0].decode()
    assert summarize(load_run(WORKERS))["verdict"]["sentence"] in verdict


def test_tensorboard_refuses_to_write_the_same_run_twice(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="the tensorboard extra (in the test extra) is not installed")
    assert main(["export", str(PLAIN), "--format", "tensorboard", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["export", str(PLAIN), "--format", "tensorboard", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds an export" in err
    assert len(list((tmp_path / PLAIN.name).iterdir())) == 1


def test_tensorboard_onto_a_full_disk_is_one_line_leaves_nothing_and_the_retry_works(tmp_path, capsys,
                                                                                    monkeypatch):
    """The disk fills while TensorBoard's own writer thread writes: one line naming the folder, exit 2, no
    thread traceback, and no half export that would block the retry."""
    import errno

    pytest.importorskip("tensorboard", reason="the tensorboard extra (in the test extra) is not installed")
    from tensorboard.summary.writer import record_writer

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(record_writer.RecordWriter, "write", full)  # called in the writer's thread
        assert main(["export", str(PLAIN), "--format", "tensorboard", "-o", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    log_dir = tmp_path / PLAIN.name
    assert f"{log_dir}: cannot write the export (No space left on device)" in line and "Traceback" not in captured.err
    assert not log_dir.exists() and not list(tmp_path.iterdir())  # nothing half-written, nothing hidden left
    assert main(["export", str(PLAIN), "--format", "tensorboard", "-o", str(tmp_path)]) == 0
    assert any(p.name.startswith("events.out.tfevents") for p in log_dir.iterdir())


@pytest.mark.parametrize(("fmt", "module"), [("tensorboard", "torch.utils.tensorboard"), ("mlflow", "mlflow"),
                                             ("wandb", "wandb")])
def test_a_missing_package_is_one_line_naming_its_extra(tmp_path, capsys, monkeypatch, fmt, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    assert main(["export", str(PLAIN), "--format", fmt, "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"pip install 'pipeprof[{fmt}]'" in err
    assert not (tmp_path / "x").exists()  # nothing written


def test_bad_export_arguments_are_one_line(tmp_path, capsys):
    assert main(["export", str(PLAIN), "--format", "tensorboard", "--run-id", "abc"]) == 2
    assert "--run-id" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["export", str(PLAIN), "--format", "mlflow", "-o", str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err


# ---- MLflow and W&B, where installed (heavy: not in the test extra) ---------------------------------------

def test_mlflow_round_trip_matches_steps_csv(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow is not installed (pipeprof[mlflow]; too heavy for the test extra)")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = tmp_path / "mlruns"
    assert main(["export", str(WORKERS), "--format", "mlflow", "-o", str(store), "--project", "p"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("mlflow: run "))
    run_id = line.split()[2]
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=store.as_uri())
    steps = pd.read_csv(WORKERS / "steps.csv")
    history = sorted(client.get_metric_history(run_id, "step/data_wait_ms"), key=lambda m: m.step)
    assert [m.step for m in history] == steps["step"].tolist()
    assert [m.value for m in history] == pytest.approx((1000 * steps["data_wait_s"]).tolist())
    run = client.get_run(run_id)
    assert run.data.params["pipeprof.loader.num_workers"] == "2" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "p"
    text = Path(client.download_artifacts(run_id, "pipeprof/verdict.md", str(tmp_path))).read_text()
    assert summarize(load_run(WORKERS))["verdict"]["sentence"] in text
    # a second export logs to that same run; a setting it already holds with another value is said, not changed
    capsys.readouterr()
    assert main(["export", str(PLAIN), "--format", "mlflow", "-o", str(store), "--run-id", run_id]) == 0
    assert "not exported: param pipeprof.description: the run already has it" in capsys.readouterr().out
    assert len(client.get_metric_history(run_id, "worker/main/busy_share")) > 0
    assert client.get_run(run_id).data.params["pipeprof.loader.num_workers"] == "2"


def test_wandb_offline_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pipeprof[wandb]; too heavy for the test extra)")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert main(["export", str(PLAIN), "--format", "wandb", "-o", str(tmp_path)]) == 0
    assert "wandb: run " in capsys.readouterr().out
    assert list((tmp_path / "wandb").glob("offline-run-*"))  # offline: files, nothing sent
