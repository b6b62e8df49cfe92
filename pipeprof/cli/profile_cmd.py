"""Profile your own training script, unmodified: DataLoader waits, batch copies and steps, with the same report.

Examples:
  pipeprof profile -- python train.py --epochs 1
  pipeprof profile --steps 300 -- python -m mypackage.train --config base.yaml
  pipeprof profile --out runs --name resnet -- python train.py
  pipeprof profile --loader num_workers=4 --loader pin_memory=True --threads 2 -- python train.py
  pipeprof profile --loader val_loader.batch_size=512 -- python train.py
  pipeprof profile --cprofile --pyspy -- python train.py

The script runs in its own process, as `python train.py` would run it, with
every torch DataLoader's iteration timed, steps cut at optimizer steps (at
DataLoader batches when there is no optimizer), batch copies to the device
timed, each batch's __getitem__ and collate timed inside the workers, and the
script's whole process tree sampled. Training and evaluation loaders are
told apart; evaluation passes are reported per loader and kept out of the
training steps.

--steps N ends the run after N steps. The script's loop then goes on for a
few seconds (at most 5.5 s), fed by variants of its training loader (one
worker more, one fewer, the other number of torch threads): the what-if
segments, from which the recommendations predict what those settings do
(run.json what_ifs); then it ends with SystemExit(0) at its next next().
--no-what-ifs (or PIPEPROF_WHAT_IFS=0) ends it at once. Without --steps the script runs to its end,
and the predictions are estimates from what the run measured (or not predicted).
--light SECONDS is the always-on mode for long jobs: the same hooks, but only
one aggregate per window of SECONDS is kept (step-time quantiles, shares of
step time, the prefetch queue, each worker's busy share, GPU use), in
windows.jsonl, bounded at 64 MiB (the oldest half dropped past it); no
steps.csv of its own. pipeprof report on its folder shows the whole job's
timeline and names a change point of its step time.
--live shows a dashboard of the last second while the script runs (steps/s,
samples/s, data wait / h2d / compute, the prefetch queue, each worker's busy
share, GPU use and memory, the verdict so far), refreshed about once a
second, in 80 columns.
Ctrl-C reaches the script as usual; what was measured is saved. A bare
`python` means the interpreter pipeprof runs in; give a path
(`-- ./venv/bin/python train.py`) to use another one that can import pipeprof.

--loader KEY=VALUE sets a DataLoader keyword argument (num_workers,
prefetch_factor, pin_memory, persistent_workers, batch_size, drop_last,
timeout, multiprocessing_context...; VALUE a Python literal) on the
script's training loader at its first iter(), without editing the script:
every loader iterated with gradients on whose name does not say val /
eval / test. --loader NAME.KEY=VALUE sets it on the loaders the script
names NAME (train_loader, self.val_loader, train_dataloader: the names the
report shows). Going to 0 workers drops prefetch_factor and
persistent_workers. --threads N runs the script with
torch.set_num_threads(N) and keeps it there (the script's own calls are
recorded, not obeyed). What was changed is in run.json's overrides, the
report's notes and summary.json's loaders (the settings really used).

--verify, after the run is saved, runs the script again (a fresh pipeprof
profile, the same --steps, its folder in the run folder's verify/) with
the top recommendation applied through --loader / --threads, and records
predicted against measured samples/s as summary.json's verification. A
recommendation that is not a loader or thread setting (where the data is
held, a code change) is not verified, and the run says why.

--cprofile [STEPS] adds the code-level view of a scenario run: cProfile in
the training process over STEPS steps (default 50) right after warm-up,
started and stopped at the step ends the hooks see, and in every DataLoader
worker (forked or spawned) for its whole life; functions.csv, the pstats
dumps cprofile-main.prof / cprofile-workers.prof, and summary.json's
code_profile (self time grouped into loading / transfer / compute / waiting
/ other). In a job of several ranks, each rank's run has its own, and the
job's shows its median rank's. --pyspy [HZ] samples the script's process
and its subprocesses from outside with py-spy (default 20 Hz) into
pyspy.speedscope.json; py-spy missing or refused (no ptrace permission) is
recorded as absent with the reason.

Exit status: the script's own (128 + N when signal N killed it); 2 for
pipeprof's own usage errors. The run folder is written in every case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeprof import format as fmt
from pipeprof.cli.arguments import non_negative_int, positive_float, positive_int, seconds_at_least_1
from pipeprof.cli.output import stdout_closed, stdout_console
from pipeprof.errors import UsageError

MAX_PYSPY_HZ = 1000  # as a scenario's profile.pyspy_hz
DEFAULT_SAMPLE_HZ, LIGHT_SAMPLE_HZ = 10.0, 1.0

if TYPE_CHECKING:
    from pipeprof.run_folder import Run
    from pipeprof.script.overrides import Overrides


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help="where run folders go (default: reports/)")
    p.add_argument("--name", help="the run's name (default: the script's or module's name)")
    p.add_argument("--steps", type=positive_int, metavar="N", help="end the script after N training steps")
    p.add_argument("--warmup-steps", type=non_negative_int, default=5, metavar="N",
                   help="steps left out of the statistics (default: 5)")
    p.add_argument("--sample-hz", type=_rate, default=None, metavar="HZ",
                   help="system sampling rate (default: 10; 1 with --light)")
    p.add_argument("--loader", action="append", metavar="[NAME.]KEY=VALUE", default=[],
                   help="set a DataLoader argument of the training loader (or of the loader named NAME); "
                        "repeatable")
    p.add_argument("--threads", type=positive_int, metavar="N", help="torch.set_num_threads(N) for the script")
    p.add_argument("--verify", action="store_true",
                   help="re-run with the top recommendation applied (--loader/--threads) and report predicted "
                        "vs measured samples/s (the re-run goes into the run folder's verify/)")
    p.add_argument("--verify-repeats", type=positive_int, default=3, metavar="N",
                   help="--verify runs the script as run and with the change alternately, N of each in fresh "
                        "processes, and compares their medians (default 3)")
    p.add_argument("--cprofile", type=positive_int, nargs="?", const=50, default=0, metavar="STEPS",
                   help="cProfile STEPS steps after warm-up (default 50) in the training process, and every "
                        "DataLoader worker for its whole life: the code-level view, as pipeprof run --cprofile")
    p.add_argument("--pyspy", type=_pyspy_rate, nargs="?", const=20, default=0, metavar="HZ",
                   help="sample the script's process and its subprocesses with py-spy at HZ (default 20, "
                        "non-blocking) into pyspy.speedscope.json")
    p.add_argument("--no-what-ifs", dest="what_ifs", action="store_false", default=None,
                   help="end the script at --steps at once: no what-if segments of its loop after the run "
                        "(also: PIPEPROF_WHAT_IFS=0 in the environment)")
    p.add_argument("--what-ifs-seconds", dest="what_ifs_s", type=positive_float, metavar="S",
                   help="the what-if segments' total budget after --steps (default: the larger of 3 s and 10 %% "
                        "of the run's training); longer measures more variants, and more windows of slow steps")
    p.add_argument("--live", action="store_true",
                   help="a terminal dashboard of the last second while the script runs (steps/s, shares, prefetch "
                        "queue, workers, GPU, the verdict so far)")
    p.add_argument("--light", type=seconds_at_least_1, metavar="SECONDS",
                   help="always-on mode for long jobs: keep only window aggregates (step-time quantiles, shares, "
                        "queue, workers, GPU), one every SECONDS, in a file bounded at 64 MiB; no per-step record")
    p.add_argument("--quiet", action="store_true", help="no summary table")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- python SCRIPT [ARGS]",
                   help="the training command: python SCRIPT ARGS, python -m MODULE ARGS, or SCRIPT.py ARGS")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"expected a rate in Hz, > 0 and <= 1000, got {text!r}")
    return value


def _pyspy_rate(text: str) -> int:
    value = positive_int(text)
    if value > MAX_PYSPY_HZ:
        raise argparse.ArgumentTypeError(f"expected a rate in Hz, a whole number from 1 to {MAX_PYSPY_HZ}, got {text!r}")
    return value


def execute(args: argparse.Namespace) -> int:
    from pipeprof.script.overrides import parse

    if args.steps is not None and args.steps <= args.warmup_steps:
        raise UsageError(f"pipeprof profile: --steps {args.steps} is not allowed with --warmup-steps "
                         f"{args.warmup_steps}: expected more than the {args.warmup_steps} warm-up steps, so some "
                         f"steps are counted")
    if args.light and (args.verify or args.cprofile):
        raise UsageError("pipeprof profile: --light keeps no step, which --verify and --cprofile need: "
                         "give --light alone")
    if args.sample_hz is None:  # a long job's light record: one tick a second is plenty beside its windows
        args.sample_hz = LIGHT_SAMPLE_HZ if args.light else DEFAULT_SAMPLE_HZ
    overrides = parse(args.loader, args.threads)  # checked before the script starts (and pandas loads): exits 2
    # pandas and the analysis load here, not when the parser is built (pipeprof --help stays fast)
    from pipeprof.pipeline.script_run import profile_script
    from pipeprof.render.console import print_summary

    live = None
    if args.live:
        from pipeprof.render.live import LiveView
        live = LiveView(stdout_console())
    try:
        saved = profile_script(args.command, out=args.out, name=args.name, steps=args.steps,
                               warmup_steps=args.warmup_steps, sample_hz=args.sample_hz, overrides=overrides,
                               cprofile_steps=args.cprofile, pyspy_hz=args.pyspy, what_ifs=args.what_ifs,
                               what_ifs_s=args.what_ifs_s, live=live.show if live is not None else None, light_s=args.light)
    finally:
        if live is not None:
            live.close()
    run, folder = saved.run, saved.folder
    summary = saved.summary
    if args.verify and run.info.status == "complete" and not run.steps.empty:
        summary = _verify(args, saved.summary, run, folder, overrides)
    try:
        if not args.quiet and (not run.steps.empty or args.light):
            print_summary(summary, folder, stdout_console())
        for note in run.info.notes:
            if note.startswith(("overridden: ", "--loader ")):
                print(note if note.startswith("overridden: ") else f"note: {note}")
        if args.quiet:  # the script's stdout is the user's: its report's place goes to stderr, as pipeprof's word
            print(f"pipeprof: report: {folder / 'report.html'}", file=sys.stderr, flush=True)
        else:
            print(f"report: {folder / 'report.html'}", flush=True)
    except BrokenPipeError:  # stdout closed early (| head): the report's place and the closing line go to stderr
        stdout_closed()
        print(f"pipeprof: report: {folder / 'report.html'}", file=sys.stderr)
    _say_how_it_ended(run, folder)
    return saved.exit_status


def _verify(args: argparse.Namespace, summary: dict[str, Any], run: Run, folder: Path,
            overrides: Overrides) -> dict[str, Any]:
    """The re-run with the top recommendation applied; the summary derived again, and one line on stderr."""
    from pipeprof.pipeline.script_verify import verify_script
    from pipeprof.pipeline.verify import store

    record = verify_script(args.command, summary, folder, base=overrides, steps=args.steps,
                           warmup_steps=args.warmup_steps, sample_hz=args.sample_hz, repeats=args.verify_repeats)
    from pipeprof.analysis.summary import as_summary
    from pipeprof.render.verification_text import print_verification

    summary = store(run, folder, record)
    print_verification(as_summary(summary).verification)
    return summary


def _say_how_it_ended(run: Run, folder: Path) -> None:
    """One line on stderr when the script did not simply finish, or gave nothing to attribute."""
    meta = run.info
    steps = len(run.steps)
    if meta.status != "complete":
        print(f"pipeprof: {meta.status}: {meta.error}; {fmt.plural(steps, 'step')} measured, saved in {folder}",
              file=sys.stderr)
    elif "steps" in meta.absences:
        print(f"pipeprof: {meta.absences['steps']}; saved in {folder}", file=sys.stderr)
