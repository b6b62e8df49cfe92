"""The summary's typed resource sections: summary.json's cpu, memory and disk, read back leniently."""

from __future__ import annotations

import json
from pathlib import Path

from pipeprof.analysis.summary import summary_record
from pipeprof.resource_use import CpuUse, DiskUse, MemoryUse, UssSnapshot
from pipeprof.run_folder import load_run

RUNS = Path(__file__).parent / "fixtures" / "runs"


def test_the_sections_read_back_as_written() -> None:
    folder = RUNS / "scenario-memmap-workers-cprofile"
    record = summary_record(load_run(folder))
    written = json.loads((folder / "summary.json").read_text())
    assert record.cpu.cores == 2 and isinstance(record.cpu.cores, int)  # "% of all 2 cores", not 2.0
    for section, kind in (("cpu", CpuUse), ("memory", MemoryUse), ("disk", DiskUse)):
        assert kind.from_json(written[section]) == getattr(record, section)
        assert getattr(record, section).to_json() == written[section]


def test_an_older_or_partial_summary_reads_as_not_measured() -> None:
    assert CpuUse.from_json(None) == CpuUse() and MemoryUse.from_json([]) == MemoryUse()
    cpu = CpuUse.from_json({"cores": True, "mean_util": "n/a", "peak_util": float("nan"), "main_mean_pct": 80})
    assert cpu == CpuUse(main_mean_pct=80.0)
    assert MemoryUse.from_json({"uss_bytes": {"main": 5.0}}).uss is None  # no snapshot count: no snapshot
    assert MemoryUse.from_json({"uss_bytes": {"main": 5.0, "snapshots": 2}}).uss == UssSnapshot(5.0, None, 2)
    assert DiskUse.from_json({"read_bytes": 10}).to_json() == {"mean_read_bytes_per_s": None, "read_bytes": 10.0}
