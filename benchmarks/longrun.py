"""A long run, simulated: the profiler's own memory and the report's render time for one hour at default rates.

    python benchmarks/longrun.py [--hours H] [--steps-per-s R] [--workers W]

The records of an hour of training are fed to the real recorders on a fake
clock — the step timer, the loading recorder and the system sampler's row
spools, exactly as the runner wires them — twice, side by side: once with
their rows streaming to spool files (what ``pipeprof run`` does) and once
with every row held in memory (no spool folder). ``tracemalloc`` measures
the peak of Python allocations while recording; the ratio is the point.
Then the streamed records become a Run, are summarized and rendered, and
the render is timed (target: under 10 s), with the size of report.html.

Default rates: 150 steps/s (scenarios/quick.toml on 2 cores makes about
140), one loading record per step from 2 workers, sampler at 10 Hz with 2
cores and 3 processes. Memory bound stated in the README: the recorders
stay under 32 MiB for any run length (they hold 256 steps and one chunk of
rows per table).

**A profiled script** (``pipeprof profile``; ``--case script``, or ``both``,
the default): the same hour as the hooks in a script's process record it —
per step a batch with its worker's record, two copies and an optimizer step
— written through the real ``EventLog`` (which holds at most half a second
of events), then read back the way ``pipeprof profile`` does at the end:
the event file in chunks into columns (``script.event_file``), cut
into steps, summarized and rendered. Side by side, the same file read into
Python lists (one list per event, what the reader did before) shows what
the columns save.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.measure.clock import FakeClock  # noqa: E402
from pipeprof.measure.loading import LoadingRecorder, LoadRecord  # noqa: E402
from pipeprof.measure.spool import Spool  # noqa: E402
from pipeprof.measure.steps import StepTimer  # noqa: E402
from pipeprof.pipeline.derive import summarize  # noqa: E402
from pipeprof.render.html import render_html  # noqa: E402
from pipeprof.run_folder import PROCESS_COLUMNS, STEP_COLUMNS, Run, sample_tables  # noqa: E402
from pipeprof.script.event_file import read_events  # noqa: E402
from pipeprof.script.event_steps import script_steps  # noqa: E402
from pipeprof.script.hooks import EventLog  # noqa: E402
from pipeprof.script.hooks import clock as host_clock
from pipeprof.script.session import Session  # noqa: E402

BOUND_MIB = 32


def record_hour(seconds: float, steps_per_s: float, workers: int, folder: Path | None) -> tuple[Run, float]:
    """Feed ``seconds`` of records to the recorders (spooled to ``folder``, or in memory); the Run and the
    peak MiB of Python allocations while recording."""
    clock = FakeClock(0.0)
    step_s = 1.0 / steps_per_s
    timer = StepTimer(clock, 0.0, 5, spool=Spool(STEP_COLUMNS, folder, "steps"))
    recorder = LoadingRecorder(clock)
    if folder is not None:
        recorder.spool_to(folder)
    samples, processes = Spool(None, folder, "samples"), Spool(PROCESS_COLUMNS, folder, "processes")
    next_tick_s, tick_s = 0.0, 0.1
    gc.collect()
    tracemalloc.start()
    for i in range(int(seconds * steps_per_s)):
        t = clock()
        timer.begin(float(i % 3))
        clock.advance(0.3 * step_s)
        timer.waited()
        clock.advance(0.05 * step_s)
        timer.copied()
        clock.advance(0.6 * step_s)
        timer.computed(128, 2.0 / (1 + i / 1000), 100, i // 1000)
        recorder.record(LoadRecord(i % workers, 100 + i % workers, t - 0.02, t - 0.001, 0.008, 0.006, 0.001,
                                   128, 128 * 3136, 0.0002), i)
        clock.advance(0.05 * step_s)
        while clock() >= next_tick_s:  # the sampler thread's ticks, as rows
            samples.append({"t_s": next_tick_s, "cpu_util_pct": 90.0, "main_cpu_pct": 95.0, "workers_cpu_pct": 80.0,
                            "main_rss_bytes": 5e8, "workers_rss_bytes": 6e8, "tree_rss_bytes": 1.1e9,
                            "workers": workers, "read_bytes_per_s": 0.0, "cpu_core0_pct": 90.0,
                            "cpu_core1_pct": 91.0})
            for pid, role in [(99, "main")] + [(100 + w, "worker") for w in range(workers)]:
                processes.append({"t_s": next_tick_s, "pid": pid, "role": role, "cpu_pct": 50.0,
                                  "rss_bytes": 3e8, "read_bytes": 0, "uss_bytes": float("nan")})
            next_tick_s += tick_s
    timer.finish()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    meta = {"scenario": {"name": "longrun", "loader": {"num_workers": workers, "batch_size": 128},
                         "data": {"storage": "ram", "samples": 60000}},
            "device": "cpu", "environment": {"cpu_cores": 2, "torch_threads": 2}, "gpu": {"available": False},
            "status": "complete", "absences": {}}
    sample_frame, process_frame = sample_tables(samples.frame(), processes.frame(), gpu=False)
    run = Run(meta=meta, steps=timer.frame(), samples=sample_frame, processes=process_frame, loading=recorder.frame())
    return run, peak / 2**20


def write_script_hour(path: Path, seconds: float, steps_per_s: float, workers: int) -> float:
    """The events of ``seconds`` of a profiled script, through the real EventLog; its peak MiB while recording."""
    log = EventLog(str(path))
    base_s, step_s = host_clock(), 1.0 / steps_per_s  # the log flushes by host time: start from now
    log.add(("S", base_s, {"pid": 1, "argv": ["train.py"], "torch_threads": 2}), base_s)
    log.add(("L", 0, {"number": 0, "name": "train_loader", "batch_size": 128, "num_workers": workers}), base_s)
    log.add(("I", 0, base_s, base_s + 0.01), base_s + 0.01)
    gc.collect()
    tracemalloc.start()
    for i in range(int(seconds * steps_per_s)):
        t = base_s + 0.01 + i * step_s
        record = [i % workers, 100 + i % workers, t - 0.02, t - 0.001, 0.008, 0.006, 0.001, 128]
        log.add(("N", 0, t, t + 0.3 * step_s, 128, record, float(i % 3)), t + 0.3 * step_s)
        log.add(("C", t + 0.3 * step_s, t + 0.33 * step_s, 401408, None), t + 0.33 * step_s)
        log.add(("C", t + 0.33 * step_s, t + 0.35 * step_s, 1024, None), t + 0.35 * step_s)
        log.add(("O", t + 0.95 * step_s), t + 0.95 * step_s)
    log.add(("X", base_s + seconds, "exit", 0), base_s + seconds)
    log.flush(final=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def _peak_mib(read: Callable[[], Any]) -> tuple[Any, float, float]:
    """What ``read()`` returns, the peak MiB of Python allocations while it ran, and the seconds it took
    (timed on a second call without tracemalloc, which slows allocation)."""
    gc.collect()
    tracemalloc.start()
    read()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    started = time.perf_counter()
    out = read()
    return out, peak / 2**20, time.perf_counter() - started


def script_case(seconds: float, steps_per_s: float, workers: int) -> None:
    print(f"script: simulated {seconds / 3600:g} h at {steps_per_s:g} steps/s (a batch, 2 copies, an optimizer step)")
    with tempfile.TemporaryDirectory(prefix="pipeprof-longrun-") as folder:
        path = Path(folder) / "events.jsonl"
        log_mib = write_script_hour(path, seconds, steps_per_s, workers)
        print(f"  EventLog's peak Python memory while recording: {log_mib:.1f} MiB; events file "
              f"{path.stat().st_size / 2**20:.0f} MiB")
        session = Session("longrun-script", path, warmup_steps=5)
        session.t0_s = host_clock()

        events, columns_mib, columns_s = _peak_mib(lambda: read_events(path))
        del events
        _, lists_mib, lists_s = _peak_mib(lambda: [json.loads(line) for line in path.open(encoding="utf-8")])
        print(f"  reading the events: into columns {columns_mib:.0f} MiB peak, {columns_s:.1f} s; into Python lists "
              f"(one per event) {lists_mib:.0f} MiB, {lists_s:.1f} s (ratios {columns_mib / lists_mib:.2f}, "
              f"{columns_s / lists_s:.2f})")

        cut, cut_mib, cut_s = _peak_mib(lambda: script_steps(read_events(path), session.t0_s, 5))
        print(f"  read and cut into steps: {cut_mib:.0f} MiB peak, {cut_s:.1f} s; "
              f"{len(cut.steps):,} steps, {len(cut.loading):,} loading records")
        del cut
        started = time.perf_counter()
        run = session.finish("complete", None, {"command_line": "python train.py"})  # reads and cuts again
        summary = summarize(run)
        html = render_html(run, summary, folder_name="longrun-script")
        render_s = time.perf_counter() - started
        print(f"  events read + steps + summary + report {render_s:.1f} s (target < 10 s: "
              f"{'met' if render_s < 10 else 'NOT met'}); report.html {len(html) / 2**20:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--steps-per-s", type=float, default=150.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--case", choices=("scenario", "script", "both"), default="both")
    args = parser.parse_args(argv)
    seconds = args.hours * 3600
    if args.case != "scenario":
        script_case(seconds, args.steps_per_s, args.workers)
    if args.case == "script":
        return 0
    print(f"simulated {args.hours:g} h at {args.steps_per_s:g} steps/s, {args.workers} workers, sampler 10 Hz")
    with tempfile.TemporaryDirectory(prefix="pipeprof-longrun-") as folder:
        started = time.perf_counter()
        run, streamed_mib = record_hour(seconds, args.steps_per_s, args.workers, Path(folder))
        record_s = time.perf_counter() - started
        spooled = sum(p.stat().st_size for p in Path(folder).iterdir()) / 2**20
    _, held_mib = record_hour(seconds, args.steps_per_s, args.workers, None)
    print(f"  recorders' peak Python memory: streamed {streamed_mib:.1f} MiB, all in memory {held_mib:.1f} MiB "
          f"(ratio {streamed_mib / held_mib:.3f}); spool files {spooled:.0f} MiB; recording took {record_s:.0f} s")
    print(f"  bound {BOUND_MIB} MiB: {'met' if streamed_mib < BOUND_MIB else 'NOT met'}")
    print(f"  tables: {len(run.steps):,} steps, {len(run.loading):,} loading records, {len(run.samples):,} samples, "
          f"{len(run.processes):,} process rows")
    started = time.perf_counter()
    summary = summarize(run)
    summarized_s = time.perf_counter() - started
    html = render_html(run, summary, folder_name="longrun")
    render_s = time.perf_counter() - started
    print(f"  summary {summarized_s:.1f} s, summary + report {render_s:.1f} s (target < 10 s: "
          f"{'met' if render_s < 10 else 'NOT met'}); report.html {len(html) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
