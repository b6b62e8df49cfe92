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
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.analysis.summary import summarize  # noqa: E402
from pipeprof.measure.clock import FakeClock  # noqa: E402
from pipeprof.measure.loading import LoadingRecorder, LoadRecord  # noqa: E402
from pipeprof.measure.spool import Spool  # noqa: E402
from pipeprof.measure.steps import StepTimer  # noqa: E402
from pipeprof.render.html import render_html  # noqa: E402
from pipeprof.run import PROCESS_COLUMNS, STEP_COLUMNS, Run, sample_tables  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--steps-per-s", type=float, default=150.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    seconds = args.hours * 3600
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
