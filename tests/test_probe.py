"""pipeprof probe: timing and statistics with fake clocks, the per-machine cache, absences, the CLI,
and one real quick probe end to end."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics

import pytest
import torch

from pipeprof.cli import probe_cmd
from pipeprof.errors import UsageError
from pipeprof.measure import probe, probe_cache
from pipeprof.measure.clock import FakeClock
from pipeprof.measure.probe import (
    QUICK,
    machine_key,
    measure_disk,
    measure_h2d,
    measure_matmul,
    measure_memory_bandwidth,
    run_probe,
    time_repeats,
)
from pipeprof.measure.probe_cache import load_or_probe, probe_path
from pipeprof.run_folder import to_json
from pipeprof.storage.pagecache import DropResult

FACTS = {"hostname": "box", "cpu_model": "AMD EPYC", "cpu_count_logical": 2, "usable_cores": 2,
         "ram_bytes": 24 << 30, "gpu_names": []}
MACHINE = {**FACTS, "key": machine_key(FACTS)}
# Tiny sizes: the real measurements in a few hundred milliseconds.
TINY = dataclasses.replace(QUICK, memory_bytes=1 << 20, disk_bytes=1 << 20, disk_repeats=2, random_reads=64,
                           matmul_sizes=(64, 65), matmul_repeats=2, matmul_min_repeat_s=0.0)


def fake_probe(quick=False, **_):
    """A probe as run_probe shapes it, without measuring."""
    return {"format_version": probe.PROBE_FORMAT_VERSION, "pipeprof": "0", "measured_at_utc": "2026-11-29T12:00:00Z",
            "quick": quick, "machine": MACHINE, "memory_bandwidth": {"median_bytes_per_s": 1e10},
            "disk": {"absent": "fake"}, "h2d": {"absent": "no CUDA device"}, "matmul": {"sizes": {}},
            "cpu": {"usable_cores": 2}, "gpu": {"absent": "fake"}, "probe_duration_s": 1.0}


class CountingMeasurer:
    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return fake_probe(**kwargs)


# ---- machine key -------------------------------------------------------------------------


@pytest.mark.parametrize("fact, other", [("hostname", "other-box"), ("cpu_model", "Intel Xeon"),
                                         ("cpu_count_logical", 64), ("usable_cores", 1),
                                         ("ram_bytes", 128 << 30), ("gpu_names", ["NVIDIA H200"])])
def test_machine_key_differs_when_any_machine_fact_differs(fact, other):
    assert machine_key({**FACTS, fact: other}) != machine_key(FACTS)
    assert machine_key(dict(FACTS)) == machine_key(FACTS)  # and is stable for the same machine


def test_machine_facts_of_this_machine_carry_their_key():
    facts = probe.machine_facts()
    assert facts["key"] == machine_key(facts) and facts["usable_cores"] >= 1 and facts["ram_bytes"] > 0


# ---- the cache ---------------------------------------------------------------------------


def test_cached_probe_is_reused_without_measuring_and_refresh_measures_again(tmp_path):
    measure = CountingMeasurer()
    first = load_or_probe(tmp_path, measure=measure, machine=MACHINE)
    assert len(measure.calls) == 1 and first["cache"]["reused"] is False
    assert measure.calls[0]["scratch_dir"] == tmp_path  # the disk test runs on the cache's file system
    assert json.loads(probe_path(tmp_path, MACHINE).read_text())["machine"]["key"] == MACHINE["key"]

    now = lambda: probe.dt.datetime(2026, 11, 29, 15, 0, tzinfo=probe.dt.timezone.utc)  # noqa: E731
    again = load_or_probe(tmp_path, measure=measure, machine=MACHINE, now=now)
    assert len(measure.calls) == 1
    assert again["cache"] == {"path": str(probe_path(tmp_path, MACHINE)), "reused": True,
                              "age_s": 3 * 3600.0, "reason": None}

    refreshed = load_or_probe(tmp_path, refresh=True, measure=measure, machine=MACHINE)
    assert len(measure.calls) == 2 and refreshed["cache"]["reused"] is False
    assert "refresh" in refreshed["cache"]["reason"]


def test_another_machine_does_not_reuse_the_cached_probe(tmp_path):
    measure = CountingMeasurer()
    load_or_probe(tmp_path, measure=measure, machine=MACHINE)
    other = {**FACTS, "gpu_names": ["NVIDIA H200"]}
    load_or_probe(tmp_path, measure=measure, machine={**other, "key": machine_key(other)})
    assert len(measure.calls) == 2
    assert len(list(tmp_path.glob("probe-*.json"))) == 2


@pytest.mark.parametrize("content", ["{not json", "", "[1, 2]", '{"format_version": 999}',
                                     json.dumps({k: v for k, v in fake_probe().items() if k != "disk"}),
                                     json.dumps({**fake_probe(), "measured_at_utc": "yesterday"}),
                                     json.dumps({**fake_probe(), "machine": {**MACHINE, "key": "someone-else"}})])
def test_a_corrupt_or_foreign_cache_file_is_measured_again_not_trusted(tmp_path, content):
    probe_path(tmp_path, MACHINE).write_text(content)
    measure = CountingMeasurer()
    result = load_or_probe(tmp_path, measure=measure, machine=MACHINE)
    assert len(measure.calls) == 1 and result["cache"]["reused"] is False and result["cache"]["reason"]
    assert json.loads(probe_path(tmp_path, MACHINE).read_text())["format_version"] == probe.PROBE_FORMAT_VERSION


def test_a_cached_quick_probe_does_not_stand_in_for_a_full_one(tmp_path):
    measure = CountingMeasurer()
    load_or_probe(tmp_path, quick=True, measure=measure, machine=MACHINE)
    assert load_or_probe(tmp_path, quick=True, measure=measure, machine=MACHINE)["cache"]["reused"]
    full = load_or_probe(tmp_path, measure=measure, machine=MACHINE)
    assert len(measure.calls) == 2 and "quick" in full["cache"]["reason"]
    assert load_or_probe(tmp_path, quick=True, measure=measure, machine=MACHINE)["cache"]["reused"]


def test_an_unwritable_cache_folder_is_one_line_and_exit_status_2_before_measuring(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    measure = CountingMeasurer()
    with pytest.raises(UsageError) as e:
        load_or_probe(blocker / "cache", measure=measure, machine=MACHINE)
    assert e.value.exit_status == 2 and "\n" not in str(e.value)
    assert str(blocker / "cache") in str(e.value) and "not writable" in str(e.value)
    assert measure.calls == []


# ---- timing and statistics ----------------------------------------------------------------


def test_statistics_over_repeats_from_a_fake_clock():
    clock = FakeClock()
    durations = iter([9.0, 0.5, 0.1, 0.3, 0.2])  # the first call is the warm-up: never timed
    copy = lambda: clock.advance(next(durations))  # noqa: E731
    result = measure_memory_bandwidth(1000, repeats=4, clock=clock, copy=copy)
    assert result["times_s"] == pytest.approx([0.5, 0.1, 0.3, 0.2])
    assert result["repeats"] == 4
    assert result["median_bytes_per_s"] == pytest.approx(statistics.median([4000, 20000, 2000 / 0.3, 10000]))
    assert result["min_bytes_per_s"] == pytest.approx(4000)  # 2 x 1000 bytes (read + write) in 0.5 s
    assert result["max_bytes_per_s"] == pytest.approx(20000)
    assert "read + write" in result["counted"]


def test_a_clock_that_did_not_move_gives_null_not_infinity():
    clock = FakeClock()
    result = measure_memory_bandwidth(1000, repeats=3, clock=clock, copy=lambda: None)
    assert json.loads(to_json(result))["median_bytes_per_s"] is None


class EventLog:
    """A fake op, clock and sync that record the order in which they are used."""

    def __init__(self, op_s=0.01):
        self.events = []
        self.clock = FakeClock()
        self.op_s = op_s

    def op(self):
        self.events.append("op")
        self.clock.advance(self.op_s)

    def read_clock(self):
        self.events.append("clock")
        return self.clock()

    def sync(self):
        self.events.append("sync")


def test_matmul_warms_up_before_its_timed_repeats_and_syncs_around_each_timing():
    log = EventLog(op_s=0.02)
    plan = dataclasses.replace(TINY, matmul_sizes=(8,), matmul_warmup=3, matmul_repeats=4, matmul_min_repeat_s=0.0)
    result = measure_matmul(plan, log.read_clock, make_op=lambda n: log.op, sync=log.sync)
    first_clock = log.events.index("clock")
    assert log.events[:3] == ["op"] * 3 and log.events[:first_clock].count("op") == 3  # warm-up, untimed
    assert log.events.count("op") == 3 + 4
    for i, event in enumerate(log.events):  # the device is synchronized before every clock read
        if event == "clock":
            assert log.events[i - 1] == "sync"
    entry = result["sizes"]["8"]
    assert entry["repeats"] == 4 and entry["median_gflop_per_s"] == pytest.approx(2 * 8**3 / 1e9 / 0.02)
    assert entry["ratio_to_reference"] == 1.0 and result["reference_n"] == 8


def test_fast_ops_are_looped_so_a_timed_repeat_lasts_min_repeat_s():
    log = EventLog(op_s=0.001)
    times_s, calls = time_repeats(log.op, clock=log.read_clock, repeats=3, warmup=2, min_repeat_s=0.05)
    assert calls == 50 and times_s == pytest.approx([0.001] * 3)
    assert log.events.count("op") == 2 + 1 + 3 * 50  # warm-up, one calibration call, repeats


def test_matmul_ratio_is_each_size_against_the_first():
    clock = FakeClock()

    def make(n):
        return lambda: clock.advance(0.01 if n == 64 else 0.02)

    result = measure_matmul(TINY, clock, make_op=make)
    assert result["sizes"]["65"]["ratio_to_reference"] == pytest.approx((65**3 / 0.02) / (64**3 / 0.01))


# ---- disk ------------------------------------------------------------------------------------


def test_a_refused_drop_makes_the_cold_numbers_absent_not_warm(tmp_path):
    refused = DropResult(files=1, bytes_total=TINY.disk_bytes, resident_before_bytes=TINY.disk_bytes,
                         resident_after_bytes=TINY.disk_bytes, dropped=False, reason="on tmpfs the cache is the storage")
    drops = []

    def drop(paths):
        drops.append(list(paths))
        return refused

    result = measure_disk(tmp_path, TINY, probe.monotonic_clock, drop=drop)
    for cold in ("sequential_read_cold", "random_read_cold"):
        assert "on tmpfs the cache is the storage" in result[cold]["absent"]
        assert "median_bytes_per_s" not in result[cold] and "median_reads_per_s" not in result[cold]
    assert result["sequential_read_warm"]["median_bytes_per_s"] > 0
    assert result["random_read_warm"]["median_reads_per_s"] > 0
    assert drops and list(tmp_path.iterdir()) == []  # the test file is gone


def test_an_unverified_drop_is_not_taken_as_cold(tmp_path):
    unverified = DropResult(1, TINY.disk_bytes, None, None, True, "applied but not verified: no mincore")
    result = measure_disk(tmp_path, TINY, probe.monotonic_clock, drop=lambda paths: unverified)
    assert "not verified" in result["sequential_read_cold"]["absent"]


def test_an_unwritable_scratch_folder_makes_the_disk_absent(tmp_path):
    result = measure_disk(tmp_path / "missing", TINY, probe.monotonic_clock)
    assert "cannot write" in result["absent"]


# ---- absences on this machine -----------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's absences")
def test_gpu_parts_are_absent_with_a_reason_on_a_machine_without_cuda(tmp_path):
    h2d = measure_h2d(TINY, probe.monotonic_clock, cuda_available=torch.cuda.is_available())
    assert h2d == {"absent": "no CUDA device (torch.cuda.is_available() is False)"}
    result = run_probe(plan=TINY, scratch_dir=tmp_path, machine=MACHINE)
    assert result["h2d"]["absent"] and result["gpu"]["absent"]
    assert "devices" not in result["gpu"] and result["matmul"]["device"] == "cpu"


# ---- the command ------------------------------------------------------------------------------


def parse(*argv):
    parser = argparse.ArgumentParser()
    probe_cmd.add_arguments(parser)
    return parser.parse_args(argv)


def test_execute_prints_a_table_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(probe_cache, "run_probe", CountingMeasurer())
    monkeypatch.setattr(probe_cache, "machine_facts", lambda: MACHINE)
    assert probe_cmd.execute(parse("--cache", str(tmp_path))) == 0
    out = capsys.readouterr().out
    assert "this machine's ceilings" in out and "memory copy (MiB/s" in out
    assert "absent: no CUDA device" in out and "measured now" in out

    assert probe_cmd.execute(parse("--cache", str(tmp_path))) == 0
    assert "cached probe from 2026-11-29T12:00:00Z" in capsys.readouterr().out

    assert probe_cmd.execute(parse("--cache", str(tmp_path), "--json")) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["machine"]["key"] == MACHINE["key"] and printed["cache"]["reused"] is True


def test_execute_on_an_unwritable_cache_folder_raises_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setattr(probe_cache, "machine_facts", lambda: MACHINE)
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="not writable"):
        probe_cmd.execute(parse("--cache", str(tmp_path / "f" / "cache")))


def test_the_command_docstring_is_its_help_text():
    assert probe_cmd.__doc__.splitlines()[0].startswith("Measure this machine's ceilings")


# ---- a real probe -----------------------------------------------------------------------------


@pytest.mark.integration
def test_a_real_quick_probe_writes_valid_json_with_positive_numbers(tmp_path, capsys):
    result = load_or_probe(tmp_path, quick=True)
    on_disk = json.loads(probe_path(tmp_path, result["machine"]).read_text())
    assert "cache" not in on_disk and on_disk["quick"] is True
    assert 0 < on_disk["probe_duration_s"] < 30
    assert on_disk["memory_bandwidth"]["median_bytes_per_s"] > 0
    disk = on_disk["disk"]
    for key, unit in (("sequential_read_warm", "bytes_per_s"), ("random_read_warm", "reads_per_s"),
                      ("sequential_read_cold", "bytes_per_s"), ("random_read_cold", "reads_per_s")):
        entry = disk[key]
        if "absent" in entry:  # a file system whose cache cannot be dropped: said, not faked
            assert key.endswith("_cold") and entry["absent"]
        else:
            assert entry[f"median_{unit}"] > 0 and entry["repeats"] == QUICK.disk_repeats
    assert [n for n in on_disk["matmul"]["sizes"]] == [str(n) for n in probe.MATMUL_SIZES]
    assert all(e["median_gflop_per_s"] > 0 for e in on_disk["matmul"]["sizes"].values())
    assert on_disk["cpu"]["usable_cores"] >= 1 and on_disk["cpu"]["torch_threads"] >= 1
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]  # the disk test file is gone
    assert probe_cmd.execute(parse("--cache", str(tmp_path), "--quick")) == 0  # reused: no second probe
    assert "cached quick probe" in capsys.readouterr().out
