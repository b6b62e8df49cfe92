"""Profile a scenario: train it, time every step, sample the system, write the run folder and report.

Examples:
  pipeprof run scenarios/quick.toml
  pipeprof run scenarios/quick.toml --set loader.num_workers=2 --set data.storage=memmap
  pipeprof run scenarios/quick.toml --set model.hidden=[256,128] --set train.steps=100
  pipeprof run scenarios/jpeg-decode.toml --verify    # re-run with the top recommendation applied

Exit status: 0 when the run completed, 1 when training failed, 130 when
interrupted (the steps measured so far are still saved), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from pipeprof.cli.arguments import add_scenario_arguments
from pipeprof.cli.keyflags import add_code_profile_flags
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.measure.probe_cache import cached_probe
from pipeprof.pipeline.derive import derived_files
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.pipeline.verify import print_verification, store, verify
from pipeprof.render.console import print_summary
from pipeprof.run_folder import new_run_folder, save_run
from pipeprof.scenario import load_scenario


def materializing_progress(progress: Progress):
    """A materialization progress callback that shows one bar per thing being built."""
    tasks: dict[str, int] = {}

    def update(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = progress.add_task(f"building {what}", total=total)
        progress.update(tasks[what], completed=done, total=total)

    return update




def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/quick.toml", out_what="run folders go")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    add_code_profile_flags(p)  # --cprofile [STEPS], --pyspy [HZ]: sugar for --set profile.<key>
    p.add_argument("--verify", action="store_true",
                   help="after the run, re-run in a fresh process with the top recommendation applied and "
                        "report predicted vs measured speed-up (the re-run goes into the run folder's verify/)")


def execute(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.overrides)
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a folder")
    probe, why_not = cached_probe(args.cache)  # the machine's ceilings, if `pipeprof probe` ran here
    context = {"scenario_file": str(args.scenario), "overrides": list(args.overrides), "probe": probe}
    if probe is None:
        context["absences"] = {"probe": f"{why_not}: run pipeprof probe"}
    console = Console(stderr=True)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TimeRemainingColumn(),
                        console=console, disable=args.quiet, refresh_per_second=4)
    resolve_device(scenario.train.device)  # a usage error before any progress bar shows
    recorder = LoadingRecorder() if scenario.profile.loading else None
    try:
        with progress:
            work = build_workload(scenario, args.cache, recorder=recorder, progress=materializing_progress(progress))
            task = progress.add_task(scenario.name, total=scenario.total_steps())
            run = profile_workload(work, recorder=recorder, context=context,
                                   on_step=lambda done, total: progress.update(task, completed=done))
    except (OSError, RuntimeError) as e:  # a full disk, a compiler torch.compile cannot use
        print(f"pipeprof: error: preparing {scenario.name}: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_FAILED
    folder = new_run_folder(args.out, scenario.name)
    summary, files = derived_files(run, folder.name)
    save_run(run, folder, files)
    if not args.quiet:
        print_summary(summary, folder)
    if (summary.get("cache") or {}).get("verified") is False:
        print(f"pipeprof: WARNING: {summary['cache']['reason']}", file=sys.stderr)
    for note in run.meta.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    status = run.meta.get("status")
    if args.verify and status == "complete":
        summary = store(run, folder, verify(scenario, summary, folder, cache=args.cache, quiet=args.quiet),
                        derived_files)
        print_verification(summary)
        if summary["verification"]["status"] == "interrupted":
            status = "interrupted"
    print(f"report: {folder / 'report.html'}")
    if status == "interrupted":
        print(f"pipeprof: {run.meta.get('error') or 'interrupted'}: {len(run.steps)} steps saved in {folder}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if status == "failed":
        print(f"pipeprof: error: training failed after {len(run.steps)} steps: {run.meta.get('error')}",
              file=sys.stderr)
        return EXIT_FAILED
    return 0
