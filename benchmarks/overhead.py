"""Profiler overhead: throughput with and without pipeprof, alternating, in one invocation.

    python benchmarks/overhead.py [SCENARIO] [--repeats N] [--set KEY=VALUE ...]

Each repeat trains the scenario three times, in rotating order:

* ``bare``: no profiler at all (the same training loop with a timer that reads
  the clock only at the end of warm-up and at the end);
* ``steps+system``: the step timer and the system sampler thread
  (``profile.loading = false``);
* ``full``: that plus worker-side fetch / prep / collate timing (the default).

Throughput is samples/s after warm-up in all three. The result is the median
over repeats of each profiled/bare ratio; target for the full profiler: >= 0.98.
Ratios, not times: the runs are made side by side on the same machine.

**Script case** (``--case script``; ``both`` is the default): the fixture
training scripts in ``tests/fixtures/`` run alternately as ``python SCRIPT``
and as ``pipeprof profile -- python SCRIPT``; each prints its own throughput
after its first 5 optimizer steps, so both sides are measured by the same
code, and the ratio profiled/bare is all pipeprof's cost: the hooks in the
script's process and workers (in every rank of the DDP fixture, whose rank 0
prints the job's samples/s), and the sampler in pipeprof's process. Target
>= 0.98. On a shared machine a 3-second script's throughput moves by ±10 %
from one run to the next, so the script case also measures the hooks' own
cost per training step part by part (``benchmarks/hook_costs.py``) and
states it as a share of the fastest fixture's step.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.hook_costs import hook_costs_us  # noqa: E402
from pipeprof.pipeline.derive import summarize  # noqa: E402
from pipeprof.pipeline.train import measure_unprofiled, profile_scenario  # noqa: E402
from pipeprof.scenario import load_scenario  # noqa: E402

TARGET = 0.98
MODES = ("bare", "steps+system", "full")
ROOT = Path(__file__).resolve().parent.parent
BATCH_SIZE = 64  # the fixtures' default
SCRIPTS = {  # name -> the fixture and its arguments: a fast loop (worst case: ~1 ms steps), and workers
    "plain_loop 0 workers": ["plain_loop.py", "--epochs", "10", "--samples", "8192", "--threads", "1"],
    "trainer 2 workers": ["trainer_class.py", "--epochs", "2", "--samples", "4096", "--num-workers", "2",
                          "--getitem-ms", "0.05", "--no-tqdm", "--threads", "1"],
    # every rank under the hooks (the start-up hook), collective wait timed at each backward pass
    "ddp 2 ranks (mp.spawn, gloo)": ["ddp_gloo.py", "--world-size", "2", "--samples", "16384", "--batch-size", "64"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default="scenarios/quick.toml")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--case", choices=("scenario", "script", "both"), default="both")
    args = parser.parse_args(argv)
    if args.case in ("scenario", "both"):
        scenario_case(args)
    if args.case in ("script", "both"):
        script_case(args.repeats)
    return 0


def scenario_case(args: argparse.Namespace) -> None:
    scenarios = {
        "steps+system": load_scenario(args.scenario, [*args.overrides, "profile.loading=false"]),
        "full": load_scenario(args.scenario, [*args.overrides, "profile.loading=true"]),
    }
    bare = scenarios["full"]
    print(f"scenario {bare.name}: {bare.total_steps()} steps, {args.repeats} repeats, rotating order")
    ratios: dict[str, list[float]] = {"steps+system": [], "full": []}
    for i in range(args.repeats):
        order = MODES[i % 3:] + MODES[: i % 3]
        result = {}
        for mode in order:
            if mode == "bare":
                result[mode] = measure_unprofiled(bare)
            else:
                result[mode] = summarize(profile_scenario(scenarios[mode]))["samples_per_s"]
        for mode in ratios:
            ratios[mode].append(result[mode] / result["bare"])
        print(f"  repeat {i + 1}: " + "   ".join(f"{m} {result[m]:8.0f}" for m in MODES) + " samples/s")
    for mode, values in ratios.items():
        median = statistics.median(values)
        print(f"{mode}/bare throughput: median {median:.3f} (min {min(values):.3f}, max {max(values):.3f})")
    full = statistics.median(ratios["full"])
    print(f"target full/bare >= {TARGET}: {'met' if full >= TARGET else 'NOT met'}")


def script_case(repeats: int) -> None:
    """Each fixture script bare and under ``pipeprof profile``, alternating which goes first."""
    fixtures = ROOT / "tests" / "fixtures"
    medians, bare_step_us = [], {}
    with tempfile.TemporaryDirectory(prefix="pipeprof-bench-") as out:
        for name, (script, *script_args) in SCRIPTS.items():
            bare_cmd = [sys.executable, str(fixtures / script), *script_args]
            profiled_cmd = [sys.executable, "-m", "pipeprof", "profile", "--quiet", "--out", out, "--", *bare_cmd]
            print(f"script {name}: {repeats} repeats, alternating order")
            ratios, bare = [], []
            for i in range(repeats):
                pair = [("bare", bare_cmd), ("profiled", profiled_cmd)]
                result = {label: _script_throughput(cmd) for label, cmd in (pair if i % 2 == 0 else pair[::-1])}
                ratios.append(result["profiled"] / result["bare"])
                bare.append(result["bare"])
                print(f"  repeat {i + 1}: bare {result['bare']:8.0f}   profiled {result['profiled']:8.0f} samples/s")
            median = statistics.median(ratios)
            medians.append(median)
            print(f"  profiled/bare throughput: median {median:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
            bare_step_us[name] = BATCH_SIZE / statistics.median(bare) * 1e6
    worst = min(medians)
    print(f"target script profiled/bare >= {TARGET}: {'met' if worst >= TARGET else 'NOT met'} "
          f"(worst median {worst:.3f})")
    costs = hook_costs_us()
    step_us = min(bare_step_us.values())
    print("the hooks' own cost per training step (hooked minus plain, fastest of interleaved repeats):")
    for part, us in costs.items():
        print(f"  {part:26s} {us:6.1f} us")
    print(f"  = {costs['total'] / step_us:.1%} of the fastest fixture's median bare step ({step_us:.0f} us, "
          f"{BATCH_SIZE} samples); budget for >= {TARGET}: {(1 / TARGET - 1):.1%}")


def _script_throughput(command: list[str]) -> float:
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    found = re.findall(r"^throughput: ([0-9.]+) samples/s", proc.stdout, re.MULTILINE)
    if not found:
        raise RuntimeError(f"no throughput line from {' '.join(command)}: {proc.stdout[-300:]}")
    return float(found[-1])


if __name__ == "__main__":
    sys.exit(main())
