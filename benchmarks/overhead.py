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
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.analysis.summary import summarize  # noqa: E402
from pipeprof.runner import measure_unprofiled, profile_scenario  # noqa: E402
from pipeprof.scenario import load_scenario  # noqa: E402

TARGET = 0.98
MODES = ("bare", "steps+system", "full")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default="scenarios/quick.toml")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
