"""Tune a scenario or your own training script: its fastest DataLoader settings on this machine, by measurement.

Two forms:
  pipeprof tune SCENARIO.toml [--max-evals N] [--window S] [--keep-storage] ...
  pipeprof tune [--steps N] [--max-evals N] [--out DIR] [--quiet] -- python train.py ARGS

A scenario: searches loader.num_workers, train.threads, loader.prefetch_factor,
loader.persistent_workers, loader.pin_memory (on CUDA) and the placement
(decoded samples cached in RAM, or held on the device where they fit), and
loader.batch_size only with --batch-sizes. The search (pipeprof/analysis/
tune.py) starts from the scenario as given, tries next what its
recommendations predict to be best, then walks one setting at a time and
keeps a change only when it gains more than 3%. Each trial is a short
steady-state measurement (--window seconds at most) in this process, a
fresh workload each time (data, model and DataLoader workers rebuilt; torch
threads set explicitly). The best setting is then confirmed by a full run in
a fresh process (--confirm-seconds), whose run folder and report land in
points/, and compared with the compute ceiling (the data on the device, no
loading at all). Prints the best settings as a TOML snippet and as
DataLoader arguments. Writes reports/<UTC>-tune-<scenario>/: tune.html,
tune.json (`best`, `points` = the trials in order, `ceiling`), points.csv.

A script (after `--`), unmodified: the same search over the training
loader's num_workers, prefetch_factor, persistent_workers, pin_memory (on
CUDA), loader.batch_size only with --batch-sizes, and torch threads, on the
real script: every trial is `pipeprof profile --steps N --loader KEY=VALUE
... --threads T -- CMD` in a fresh process, starting from the settings the
script uses itself and seeded by its first run's recommendations. The best
trials are run again for --confirm-steps steps beside the script's own
settings, and one is chosen only when it beats them by more than 3% there;
otherwise the answer is "keep your settings" (never a slower one). Prints
the winning settings as the Python to write where the loader is built.
Writes reports/<UTC>-tune-<script>/: tune.json (`base` and `best` with
`change` and `samples_per_s`, `trials` in order) and each trial's run folder
under trials/. A `--` among the script's own arguments is not passed on.

Examples:
  pipeprof tune scenarios/jpeg-decode.toml
  pipeprof tune scenarios/quick.toml --max-evals 8 --window 3
  pipeprof tune --steps 100 --max-evals 10 -- python train.py --epochs 1

Exit status: 0 when a best setting was found, 1 when no trial completed (a
script that fails as written: its error is printed, the folder kept), 130
when interrupted (the trials so far are kept), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from pipeprof import format as fmt
from pipeprof.cli.arguments import non_negative_int, positive_float, positive_int
from pipeprof.cli.progress import Lines
from pipeprof.cli.sweep_output import print_table, report_end
from pipeprof.errors import EXIT_FAILED, EXIT_INTERRUPTED, UsageError
from pipeprof.pipeline.progress import SILENT
from pipeprof.scenario import load_scenario

DEFAULT_MAX_EVALS = 12
DEFAULT_WINDOW_S = 4.0
DEFAULT_CONFIRM_S = 10.0
DEFAULT_STEPS = 100  # a script trial's steps (the script's own first --warmup-steps left out)
DEFAULT_WARMUP_STEPS = 10
CONFIRM_STEPS_PER_STEP = 3  # a confirming run of a script is this many times a trial's steps by default
SCENARIO_ONLY = ("window", "confirm_seconds", "confirm_repeats", "keep_storage", "overrides", "cache")
SCRIPT_ONLY = ("steps", "warmup_steps", "confirm_steps")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", nargs="?", metavar="SCENARIO",
                   help="scenario file, e.g. scenarios/jpeg-decode.toml (or `-- python train.py ARGS`)")
    p.add_argument("command", nargs="*", metavar="-- python SCRIPT [ARGS]",
                   help="a training script to tune from outside, unmodified: python SCRIPT ARGS, "
                        "python -m MODULE ARGS, or SCRIPT.py ARGS")
    p.add_argument("-o", "--out", type=Path, metavar="DIR", default=Path("reports"),
                   help="where the tune folder goes (default: reports)")
    p.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS, metavar="N",
                   help=f"at most N trial measurements (default {DEFAULT_MAX_EVALS})")
    p.add_argument("--batch-sizes", default=None, metavar="B1,B2,...",
                   help="also search loader.batch_size over these values (changes the optimization!)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress lines and no table (a script's winning settings are still printed)")
    scenario = p.add_argument_group("a scenario")
    scenario.add_argument("--set", dest="overrides", action="append", default=None, metavar="SECTION.KEY=VALUE",
                          help="override a scenario key; the value is read as TOML (repeatable)")
    scenario.add_argument("--cache", type=Path, default=None,
                          help="data cache folder (default: $PIPEPROF_CACHE or ~/.cache/pipeprof)")
    scenario.add_argument("--window", type=positive_float, default=None, metavar="S",
                          help=f"seconds per trial at most, until steady (default {DEFAULT_WINDOW_S:g})")
    scenario.add_argument("--confirm-seconds", type=positive_float, default=None, metavar="S",
                          help="the confirming run of the best setting, in a fresh process "
                               f"(default {DEFAULT_CONFIRM_S:g})")
    scenario.add_argument("--confirm-repeats", type=positive_int, default=None, metavar="N",
                          help="the confirming runs: the best and the settings as run alternately, N of each "
                               "(default 3; 1: the best alone)")
    scenario.add_argument("--keep-storage", action="store_true", default=None,
                          help="do not try other placements of the data (RAM, device): only loader and thread "
                               "settings")
    script = p.add_argument_group("a script (after --)")
    script.add_argument("--steps", type=positive_int, default=None, metavar="N",
                        help=f"training steps per trial (default {DEFAULT_STEPS})")
    script.add_argument("--warmup-steps", type=non_negative_int, default=None, metavar="N",
                        help=f"steps of each trial left out of its rate (default {DEFAULT_WARMUP_STEPS}, at most "
                             "a quarter of --steps)")
    script.add_argument("--confirm-steps", type=positive_int, default=None, metavar="N",
                        help="steps of each confirming run of the best trials and of the script's own "
                             f"settings (default {CONFIRM_STEPS_PER_STEP} x --steps)")


def execute(args: argparse.Namespace) -> int:
    command = _script_command(args)
    if command is not None:
        return _execute_script(args, command)
    _refuse(args, SCRIPT_ONLY, "a scenario")
    overrides = args.overrides or []
    window = DEFAULT_WINDOW_S if args.window is None else args.window
    confirm = DEFAULT_CONFIRM_S if args.confirm_seconds is None else args.confirm_seconds
    scenario = load_scenario(args.scenario, overrides)  # bad input refused before torch loads
    from pipeprof.pipeline.tune import CONFIRM_REPEATS, Budget, tune  # torch and the analysis load here
    repeats = CONFIRM_REPEATS if args.confirm_repeats is None else args.confirm_repeats
    console = Console(stderr=True)
    doc, folder = tune(scenario, scenario_file=args.scenario, overrides=overrides, out=args.out,
                       budget=Budget(args.max_evals, window, confirm, confirm_repeats=repeats),
                       batch_sizes=_batch_sizes(args.batch_sizes), keep_storage=bool(args.keep_storage),
                       cache=args.cache, progress=SILENT if args.quiet else Lines(console))
    if not args.quiet:
        print_table(doc, folder)
        if doc.get("toml_snippet"):
            if doc["status"] == "interrupted" and (doc.get("best") or {}).get("index") != -1:
                print("interrupted before the best was confirmed: these settings come from a short trial")
            print(f"best settings (TOML):\n{doc['toml_snippet']}\nas DataLoader arguments:\n"
                  f"{doc['dataloader_kwargs']}\n{doc['ceiling']['words']}")
    return report_end(doc, folder, console)


def _script_command(args: argparse.Namespace) -> list[str] | None:
    """The training command when the words are one (``-- python train.py ARGS``); None for a scenario file."""
    words = ([args.scenario] if args.scenario is not None else []) + list(args.command)
    if not words:
        raise UsageError("pipeprof tune: expected a scenario file or `-- python SCRIPT [ARGS]` "
                         "(see pipeprof tune --help)")
    first = Path(words[0])
    if len(words) == 1 and first.suffix != ".py" and not first.name.startswith("python"):
        return None
    if first.suffix == ".toml":
        raise UsageError(f"pipeprof tune {words[0]}: unexpected words after the scenario file: "
                         f"{' '.join(words[1:])}")
    return words


def _refuse(args: argparse.Namespace, names: tuple[str, ...], form: str) -> None:
    given = [n for n in names if getattr(args, n) is not None]
    if given:
        flag = "--set" if given[0] == "overrides" else "--" + given[0].replace("_", "-")
        raise UsageError(f"pipeprof tune: {flag} is not an option for {form} (see pipeprof tune --help)")


def _execute_script(args: argparse.Namespace, command: list[str]) -> int:
    _refuse(args, SCENARIO_ONLY, "a script")
    from pipeprof.pipeline.script_run import launcher_command, split_command  # the pipeline: not for --help
    from pipeprof.pipeline.script_tune import ProfileRunner, ScriptBudget, tune_script

    try:
        split_command(command)
    except UsageError:
        if launcher_command(command) is None:
            raise
    steps = args.steps or DEFAULT_STEPS
    warmup = min(DEFAULT_WARMUP_STEPS, steps // 4) if args.warmup_steps is None else args.warmup_steps
    if warmup >= steps:
        raise UsageError(f"pipeprof tune: --warmup-steps {warmup} leaves none of --steps {steps} to measure")
    if args.max_evals < 1:
        raise UsageError(f"pipeprof tune: --max-evals {args.max_evals}: expected an integer >= 1")
    budget = ScriptBudget(steps, args.confirm_steps or CONFIRM_STEPS_PER_STEP * steps, args.max_evals)
    console = Console(stderr=True)
    doc, folder = tune_script(command, out=args.out, budget=budget,
                              run_trial=ProfileRunner(command, warmup_steps=warmup),
                              batch_sizes=_batch_sizes(args.batch_sizes),
                              progress=SILENT if args.quiet else Lines(console))
    print(answer_text(doc), end="")
    print(f"tune: {folder / 'tune.json'}", flush=True)
    if doc["status"] == "interrupted":
        trials = sum(1 for t in doc.get("trials") or [] if t.get("status") == "complete")
        print(f"pipeprof: tune interrupted after {fmt.plural(trials, 'complete trial')}; "
              f"{'the best above is confirmed' if (doc.get('best') or {}).get('confirmed') else 'no best was confirmed'}"
              f"; saved in {folder}", file=sys.stderr)
    if doc["status"] == "failed":
        print(f"pipeprof: tune: {doc['error']}; saved in {folder}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_INTERRUPTED if doc["status"] == "interrupted" else 0


def answer_text(doc: dict) -> str:
    """The script tuner's answer: the base and best rates and the Python to write (empty without a best)."""
    base, best = doc.get("base"), doc.get("best")
    if not base or not best:
        return ""
    lines = [f"the script as written: {fmt.rate(base['samples_per_s'])}"]
    if not best["change"]:
        # "in a confirming run" only where one ran: the base confirmed beside the best trials
        where = f"in {doc['confirm_steps']}-step confirming runs" if base.get("confirmed") else "in the trials"
        lines.append("best: keep the script's settings (no change was faster by more than "
                     f"{100 * doc['min_gain']:.0f}% {where})")
    else:
        how = f" (confirmed in {doc['confirm_steps']}-step runs)" if best.get("confirmed") else \
            " (a short trial, not confirmed)"
        lines.append(f"best: x{best['speedup']:.2f}: {fmt.rate(best['samples_per_s'])}{how}")
        lines.append("write where the training loader is built:")
        lines += [f"  {part}" for part in best["python"].split("; ")]
    return "\n".join(lines) + "\n"


def _batch_sizes(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    if not text.strip():
        raise UsageError(f"--batch-sizes {text!r}: expected integers >= 1 separated by commas, e.g. 64,128,256 "
                         "(leave the flag out to keep the scenario's batch size)")
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--batch-sizes {text}: expected integers >= 1 separated by commas, e.g. 64,128,256") \
            from None
    if any(s < 1 for s in sizes):
        raise UsageError(f"--batch-sizes {text}: expected integers >= 1 separated by commas, e.g. 64,128,256")
    return sizes
