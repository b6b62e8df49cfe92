"""Start-up and the end of a profiled run: the time pipeprof takes before and after the work.

    python benchmarks/startup.py [--repeats N] [--script-repeats N] [--before REV]

**Commands**: ``pipeprof --help``, ``pipeprof list`` and ``pipeprof compare
--help``, each a fresh process (``python -m pipeprof ...``), wall time from
start to exit, beside ``python -c pass`` (the interpreter alone) and
``python -c "import torch, pandas, matplotlib"`` (what a CLI that imports
them all pays before doing anything). Median of ``--repeats`` runs, the
commands interleaved so a slow spell of the shared machine falls on all.

**The end of a profiled script**: the fixture scripts in ``tests/fixtures/``
run alternately as ``python SCRIPT`` and as ``pipeprof profile --quiet --
python SCRIPT``, through a wrapper that writes the machine's monotonic clock
when the script's ``main()`` returns (after its last step). The *tail* is
from there to the exit of the process that was started: the interpreter's
own teardown when bare; the script's teardown, the sampler's stop, reading
the events, the summary, the report's plots and the run folder under
pipeprof. Target: about 2 s. Median of ``--script-repeats`` runs, with the
whole wall time of each side.

``--before REV`` runs every command and the profiled scripts also from a
checkout of REV (``git archive`` into a temporary folder, run with that
folder first on the path), interleaved with the current tree: before and
after measured side by side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
COMMANDS = {  # name -> arguments after `python`
    "python -c pass": ["-c", "pass"],
    "import torch, pandas, matplotlib": ["-c", "import torch, pandas, matplotlib.figure"],
    "pipeprof --help": ["-m", "pipeprof", "--help"],
    "pipeprof list": ["-m", "pipeprof", "list", str(ROOT / "scenarios")],
    "pipeprof compare --help": ["-m", "pipeprof", "compare", "--help"],
}
PIPEPROF_ONLY = ("pipeprof --help", "pipeprof list", "pipeprof compare --help")
SCRIPTS = {  # name -> the fixture and its arguments
    "plain_loop (128 steps)": ["plain_loop.py", "--threads", "1"],
    "plain_loop (MNIST-sized: 60,000 samples, 938 steps)": ["plain_loop.py", "--epochs", "1", "--samples", "60000",
                                                            "--threads", "1"],
    "trainer_class (2 workers)": ["trainer_class.py", "--num-workers", "2", "--no-tqdm", "--threads", "1"],
}
TAIL_TARGET_S = 2.0
WRAPPER = """\
import os, runpy, sys, time
script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    with open(os.environ["PIPEPROF_BENCH_END"], "w") as f:
        f.write(repr(time.monotonic()))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("--script-repeats", type=int, default=3, help="runs of each script each way (default 3)")
    parser.add_argument("--before", metavar="REV", help="also measure this git revision, side by side")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pipeprof-startup-") as tmp:
        trees = {"now": ROOT}
        if args.before:
            trees[f"at {args.before}"] = checkout(args.before, Path(tmp) / "before")
        print(f"commands: wall time from start to exit, median of {args.repeats} (min-max), seconds")
        commands(trees, args.repeats)
        print()
        print(f"profiled scripts: median of {args.script_repeats} (min-max), seconds; tail = from the script's "
              f"return to the exit (target about {TAIL_TARGET_S:g} s)")
        scripts(trees, args.script_repeats, Path(tmp))
    return 0


def checkout(rev: str, folder: Path) -> Path:
    """The tree of ``rev`` in ``folder`` (``git archive``: the committed files only)."""
    folder.mkdir(parents=True)
    archive = folder.with_suffix(".tar")
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), rev], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def environment(tree: Path) -> dict[str, str]:
    """Run with ``tree``'s pipeprof first on the path (the installed one is this checkout)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])]))


def run_s(command: Sequence[str], tree: Path, extra_env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ``command`` in ``tree``; the monotonic clock at its start and at its exit."""
    env = {**environment(tree), **(extra_env or {})}
    started = time.monotonic()
    proc = subprocess.run(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ended = time.monotonic()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} (in {tree}) exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return started, ended


def commands(trees: dict[str, Path], repeats: int) -> None:
    cases = [(name, label, tree) for name in COMMANDS for label, tree in trees.items()
             if label == "now" or name in PIPEPROF_ONLY]
    times: dict[tuple[str, str], list[float]] = {(name, label): [] for name, label, _ in cases}
    for _ in range(repeats):
        for name, label, tree in cases:
            started, ended = run_s([sys.executable, *COMMANDS[name]], tree)
            times[(name, label)].append(ended - started)
    width = max(len(name) for name in COMMANDS) + 2
    for name, label, _ in cases:
        t = times[(name, label)]
        suffix = f" ({label})" if len(trees) > 1 and name in PIPEPROF_ONLY else ""
        print(f"  {name + suffix:<{width + 14}} {statistics.median(t):6.2f}  ({min(t):.2f}-{max(t):.2f})")


def scripts(trees: dict[str, Path], repeats: int, tmp: Path) -> None:
    wrapper = tmp / "wrapper.py"
    wrapper.write_text(WRAPPER)
    end_file = tmp / "end"
    ways = [("bare", ROOT)] + [(f"pipeprof profile{'' if label == 'now' else f' ({label})'}", tree)
                               for label, tree in trees.items()]
    for name, (fixture, *script_args) in SCRIPTS.items():
        results: dict[str, tuple[list[float], list[float]]] = {way: ([], []) for way, _ in ways}
        for _ in range(repeats):
            for way, tree in ways:
                script = [str(wrapper), str(FIXTURES / fixture), *script_args]
                if way == "bare":
                    command = [sys.executable, *script]
                else:
                    command = [sys.executable, "-m", "pipeprof", "profile", "--quiet", "--out", str(tmp / "runs"),
                               "--", "python", *script]
                started, ended = run_s(command, tree, {"PIPEPROF_BENCH_END": str(end_file)})
                results[way][0].append(ended - started)
                results[way][1].append(ended - float(end_file.read_text()))
        print(f"  {name}:")
        for way, (totals, tails) in results.items():
            print(f"    {way:<32} total {statistics.median(totals):6.2f} ({min(totals):.2f}-{max(totals):.2f})"
                  f"   tail {statistics.median(tails):5.2f} ({min(tails):.2f}-{max(tails):.2f})")


if __name__ == "__main__":
    sys.exit(main())
