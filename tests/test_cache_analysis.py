"""Disk reads per epoch and the cold-cache verdict, from hand-made tables."""

import math

import pandas as pd
import pytest

from pipeprof.analysis.cache import MIN_COLD_READ_FRACTION, cold_cache_check, epoch_reads
from pipeprof.render.cache_text import cache_json
from pipeprof.run_folder import PROCESS_COLUMNS, STEP_COLUMNS

MB = 1_000_000
DATASET_BYTES = 100 * MB


def make_steps(epochs=2, steps_per_epoch=10, step_s=0.1, samples=64):
    rows = []
    for e in range(epochs):
        for i in range(steps_per_epoch):
            n = e * steps_per_epoch + i
            rows.append({"step": n, "epoch": e, "warmup": n < 2, "t_start_s": n * step_s,
                         "data_wait_s": 0.05, "h2d_s": 0.0, "compute_s": 0.04, "step_s": step_s,
                         "host_wait_s": 0.05, "samples": samples, "loss": 1.0, "correct": 10})
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def make_processes(readings):
    """readings: (t_s, pid, cumulative read_bytes) triples."""
    rows = [{"t_s": t, "pid": pid, "role": "main" if pid == 1 else "worker", "cpu_pct": 50.0,
             "rss_bytes": 1e8, "read_bytes": r, "uss_bytes": math.nan} for t, pid, r in readings]
    return pd.DataFrame(rows, columns=PROCESS_COLUMNS)


def test_windows_come_from_the_steps():
    df = epoch_reads(make_steps(), make_processes([(0.0, 1, 0.0), (2.0, 1, 0.0)]))
    assert list(df.columns[:5]) == ["epoch", "start_s", "end_s", "samples", "read_bytes"]
    assert df["epoch"].tolist() == [0, 1]
    assert df["start_s"].tolist() == pytest.approx([0.0, 1.0])
    assert df["end_s"].tolist() == pytest.approx([1.0, 2.0])
    assert df["samples"].tolist() == [640, 640]
    assert df["read_bytes"].tolist() == [0.0, 0.0]


def test_reads_are_summed_over_processes_and_interpolated_between_ticks():
    # main reads 10 MB/s steadily, sampled every 0.4 s (ticks do not meet the
    # epoch boundary at 1.0 s); a worker present throughout reads 50 MB in
    # epoch 0 and 80 MB in epoch 1.
    main = [(t, 1, 5 * MB + 10 * MB * t) for t in (0.0, 0.4, 0.8, 1.2, 1.6, 2.0)]
    worker = [(0.0, 7, 0.0), (1.0, 7, 50 * MB), (2.0, 7, 130 * MB)]
    df = epoch_reads(make_steps(), make_processes(main + worker))
    assert df["read_bytes"].tolist() == pytest.approx([60 * MB, 90 * MB])
    assert df["unattributed_read_bytes"].tolist() == [0.0, 0.0]


def test_a_worker_first_seen_mid_window_counts_from_its_first_reading():
    # Non-persistent workers of epoch 1 start at 1.0 s but are first seen at
    # 1.5 s with 30 MB already read: that 30 MB is reported apart, not counted.
    readings = [(0.0, 1, 0.0), (2.0, 1, 0.0),
                (0.2, 7, 0.0), (0.9, 7, 95 * MB),  # epoch 0's worker, exits before 1.0 s
                (1.5, 8, 30 * MB), (2.0, 8, 100 * MB)]
    df = epoch_reads(make_steps(), make_processes(readings))
    assert df["read_bytes"].tolist() == pytest.approx([95 * MB, 70 * MB])
    assert df["unattributed_read_bytes"].tolist() == pytest.approx([0.0, 30 * MB])


def test_a_reused_pid_is_a_new_process():
    # pid 7 exits at 0.9 s having read 90 MB; a new process gets pid 7 and
    # reads 40 MB from 1.2 s to 2.0 s. The drop in the counter is not "minus 50 MB".
    readings = [(0.0, 7, 0.0), (0.9, 7, 90 * MB), (1.2, 7, 0.0), (2.0, 7, 40 * MB)]
    df = epoch_reads(make_steps(), make_processes(readings))
    assert df["read_bytes"].tolist() == pytest.approx([90 * MB, 40 * MB])


def test_unmeasured_reads_are_nan():
    readings = [(0.0, 1, math.nan), (2.0, 1, math.nan)]
    df = epoch_reads(make_steps(), make_processes(readings))
    assert df["read_bytes"].isna().all()
    assert epoch_reads(make_steps(), make_processes([]))["read_bytes"].isna().all()


def test_a_missing_step_time_ends_the_epoch_at_its_last_start():
    steps = make_steps(epochs=1)
    steps.loc[steps.index[-1], "step_s"] = math.nan
    df = epoch_reads(steps, make_processes([(0.0, 1, 0.0)]))
    assert df["end_s"].tolist() == pytest.approx([0.9])


def _epochs(*read_bytes, samples=640, unattributed=0.0):
    return pd.DataFrame({"epoch": range(len(read_bytes)), "start_s": [float(i) for i in range(len(read_bytes))],
                         "end_s": [i + 1.0 for i in range(len(read_bytes))], "samples": samples,
                         "read_bytes": read_bytes, "unattributed_read_bytes": unattributed})


def checked(*args, **kwargs):
    """The check as summary.json keeps it: the record's data, its reason worded (render.cache_text)."""
    return cache_json(cold_cache_check(*args, **kwargs))


def _drop(dropped=True, after=0, reason=None):
    return {"files": 1, "bytes_total": DATASET_BYTES, "resident_before_bytes": DATASET_BYTES,
            "resident_after_bytes": after, "dropped": dropped, "reason": reason}


def test_cold_is_verified_when_every_epoch_read_the_data_set():
    drops = [_drop(), _drop()]
    verdict = checked(_epochs(98 * MB, 85 * MB), DATASET_BYTES, "cold", drops)
    assert verdict["verified"] is True
    assert verdict["min_read_fraction"] == pytest.approx(0.85)
    assert [e["read_fraction"] for e in verdict["epochs"]] == pytest.approx([0.98, 0.85])
    assert verdict["epochs"][1]["drop"] == drops[1]
    assert verdict["drops"] == drops
    assert verdict["threshold"] == MIN_COLD_READ_FRACTION == 0.8
    assert "85%" in verdict["reason"]


def test_an_epoch_served_from_the_cache_fails_loudly_and_cites_the_drop():
    why = "37% of the data set is still in the page cache after POSIX_FADV_DONTNEED: memory maps"
    drops = [_drop(), _drop(), _drop(dropped=False, after=37 * MB, reason=why)]
    verdict = checked(_epochs(99 * MB, 95 * MB, 12 * MB), DATASET_BYTES, "cold", drops)
    assert verdict["verified"] is False
    assert verdict["min_read_fraction"] == pytest.approx(0.12)
    assert "epoch 2 read only 12% of the data set from disk" in verdict["reason"]
    reason = cold_cache_check(_epochs(99 * MB, 95 * MB, 12 * MB), DATASET_BYTES, "cold", drops).reason
    assert reason.kind == "cache_not_cold" and [(p["epoch"], p["drop"]) for p in reason.parts] == [(2, "failed")]
    assert reason.parts[0]["read_fraction"] == pytest.approx(0.12) and reason.parts[0]["drop_reason"] == why
    assert "the page cache was not dropped" in verdict["reason"] and why in verdict["reason"]
    assert "epoch 0" not in verdict["reason"] and "epoch 1" not in verdict["reason"]


def test_a_missing_drop_and_a_drop_that_did_not_help_are_told_apart():
    # Drops carrying an "epoch" key are matched by it: none was recorded for epoch 0.
    drops = [dict(_drop(), epoch=1)]
    verdict = checked(_epochs(5 * MB, 3 * MB), DATASET_BYTES, "cold", drops)
    assert verdict["verified"] is False
    assert "epoch 0 read only 5%" in verdict["reason"]
    assert "no page-cache drop was recorded" in verdict["reason"]
    assert "epoch 1 read only 3%" in verdict["reason"]
    assert "was dropped before it" in verdict["reason"] and "read the files back" in verdict["reason"]
    assert verdict["epochs"][0]["drop"] is None


def test_reads_hidden_before_a_worker_was_seen_are_mentioned():
    verdict = checked(_epochs(60 * MB, unattributed=30 * MB), DATASET_BYTES, "cold", [_drop()])
    assert verdict["verified"] is False
    assert "30% more was read by workers before the sampler first saw them" in verdict["reason"]


def test_a_short_last_epoch_is_held_to_its_share():
    # 1000 samples in the data set; the last epoch was cut at 320 samples and read 30 MB.
    epochs = _epochs(95 * MB, 30 * MB, samples=[1000, 320])
    verdict = checked(epochs, DATASET_BYTES, "cold", None, dataset_samples=1000)
    assert verdict["epochs"][1]["expected_bytes"] == pytest.approx(32 * MB)
    assert verdict["epochs"][1]["read_fraction"] == pytest.approx(30 / 32)
    assert verdict["verified"] is True
    # Without the sample count the same epoch is judged against the whole data set.
    assert checked(epochs, DATASET_BYTES, "cold", None)["verified"] is False


def test_warm_reports_reads_without_a_verdict():
    verdict = checked(_epochs(1 * MB, 0.0), DATASET_BYTES, "warm", None)
    assert verdict["verified"] is None
    assert verdict["cache"] == "warm"
    assert [e["read_fraction"] for e in verdict["epochs"]] == pytest.approx([0.01, 0.0])
    assert verdict["drops"] is None


def test_unmeasured_reads_cannot_verify():
    verdict = checked(_epochs(math.nan, math.nan), DATASET_BYTES, "cold", [_drop(), _drop()])
    assert verdict["verified"] is None
    assert "not measured" in verdict["reason"]
    assert verdict["epochs"][0]["read_bytes"] is None and verdict["min_read_fraction"] is None


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        checked(_epochs(1.0), DATASET_BYTES, "lukewarm", None)
    with pytest.raises(ValueError):
        checked(_epochs(1.0), 0, "cold", None)


def test_epoch_reads_feed_the_check_end_to_end():
    readings = [(0.0, 1, 0.0), (1.0, 1, 92 * MB), (2.0, 1, 92 * MB + 4 * MB)]
    epochs = epoch_reads(make_steps(), make_processes(readings))
    verdict = checked(epochs, DATASET_BYTES, "cold", [_drop(), _drop()])
    assert verdict["verified"] is False
    assert "epoch 1 read only 4%" in verdict["reason"]
