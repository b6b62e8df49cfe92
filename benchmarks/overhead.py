"""Profiler overhead: throughput with and without pipeprof, alternating, in one invocation.

    python benchmarks/overhead.py [SCENARIO] [--repeats N] [--set KEY=VALUE ...]

Each repeat trains the scenario twice, in alternating order: once bare (no
sampler, no step timer: the training loop reads the clock only at the end of
warm-up and at the end) and once under the full profiler (step timer and
system sampler). Throughput is samples/s after warm-up in both. The result is
the median over repeats of profiled/unprofiled; target: >= 0.98.
A ratio, not a time: it compares two runs made side by side on the same machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.analysis.summary import summarize  # noqa: E402
from pipeprof.runner import build_workload, measure_unprofiled, profile_workload  # noqa: E402
from pipeprof.scenario import load_scenario  # noqa: E402

TARGET = 0.98


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default="scenarios/quick.toml")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    scenario = load_scenario(args.scenario, args.overrides)
    print(f"scenario {scenario.name}: {scenario.total_steps()} steps, {args.repeats} repeats, alternating order")
    ratios = []
    for i in range(args.repeats):
        order = ("bare", "profiled") if i % 2 == 0 else ("profiled", "bare")
        result = {}
        for mode in order:
            if mode == "bare":
                result[mode] = measure_unprofiled(scenario)
            else:
                run = profile_workload(build_workload(scenario))
                result[mode] = summarize(run)["samples_per_s"]
        ratios.append(result["profiled"] / result["bare"])
        print(f"  repeat {i + 1}: bare {result['bare']:9.0f} samples/s   profiled {result['profiled']:9.0f} "
              f"samples/s   ratio {ratios[-1]:.3f}")
    median = statistics.median(ratios)
    verdict = "met" if median >= TARGET else "NOT met"
    print(f"profiled/unprofiled throughput: median {median:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"target >= {TARGET}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
