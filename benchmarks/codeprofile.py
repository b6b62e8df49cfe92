"""The code-level profilers' cost: throughput with and without --cprofile / --pyspy, side by side, in one invocation.

    python benchmarks/codeprofile.py [SCENARIO] [--repeats N] [--cprofile-steps N] [--set KEY=VALUE ...]

Each repeat trains the scenario (default ``scenarios/quick.toml`` with two
workers) once per mode, in rotating order:

* ``pipeprof``: the profiler as ``pipeprof run`` uses it by default (step
  timer, system sampler, loading timing), no code-level profiling: the baseline;
* ``cprofile``: plus ``profile.cprofile_steps`` (cProfile on a window of steps
  in the training process, and the workers for their whole life);
* ``pyspy20`` / ``pyspy100`` (``--pyspy-rates``): plus py-spy at 20 / 100 Hz
  (``--subprocesses --nonblocking``), sampling the whole run.

Throughput is samples/s over the counted steps. Printed: the median over
repeats of each mode's throughput over the baseline's, and the in-run
measures the report shows: for ``cprofile`` the median profiled step over the
unprofiled one (training process only), for py-spy its own CPU time as a
share of one core. Ratios, not times: the runs are made
side by side on the same machine. py-spy modes are skipped when py-spy is not
installed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.measure.pyspy import locate_pyspy  # noqa: E402
from pipeprof.pipeline.derive import summarize  # noqa: E402
from pipeprof.pipeline.train import profile_scenario  # noqa: E402
from pipeprof.scenario import load_scenario  # noqa: E402

BASELINE = "pipeprof"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default="scenarios/quick.toml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cprofile-steps", type=int, default=50)
    parser.add_argument("--pyspy-rates", default="20,100", help="py-spy rates to try, Hz (default 20,100)")
    parser.add_argument("--set", dest="overrides", action="append", default=["loader.num_workers=2"])
    args = parser.parse_args(argv)
    modes = {BASELINE: [], "cprofile": [f"profile.cprofile_steps={args.cprofile_steps}"],
             **{f"pyspy{hz}": [f"profile.pyspy_hz={hz}"] for hz in args.pyspy_rates.split(",") if hz}}
    if locate_pyspy() is None:
        print("py-spy is not installed: pyspy modes skipped (pip install 'pipeprof[pyspy]')")
        modes = {k: v for k, v in modes.items() if not k.startswith("pyspy")}
    scenarios = {mode: load_scenario(args.scenario, [*args.overrides, "profile.cprofile_steps=0",
                                                     "profile.pyspy_hz=0", *extra])
                 for mode, extra in modes.items()}
    names = list(modes)
    base = scenarios[BASELINE]
    print(f"scenario {base.name} ({' '.join(args.overrides)}): {base.total_steps()} steps, {args.repeats} repeats, "
          f"rotating order")
    ratios: dict[str, list[float]] = {m: [] for m in names if m != BASELINE}
    window: list[float] = []
    spy_cpu: dict[str, list[float]] = {m: [] for m in names if m.startswith("pyspy")}
    for i in range(args.repeats):
        k = i % len(names)
        result = {}
        for mode in names[k:] + names[:k]:
            summary = summarize(profile_scenario(scenarios[mode]))
            result[mode] = summary["samples_per_s"]
            if mode == "cprofile":
                overhead = ((summary.get("code_profile") or {}).get("cprofile") or {}).get("overhead") or {}
                if overhead.get("ratio") is not None:
                    window.append(overhead["ratio"])
            spy = summary["code_profile"]["pyspy"]
            if mode.startswith("pyspy") and "absent" in spy:
                print(f"  {mode}: py-spy did not record: {spy['absent']}")
            elif mode.startswith("pyspy") and spy.get("cpu_fraction") is not None:
                spy_cpu[mode].append(spy["cpu_fraction"])
        for mode in ratios:
            ratios[mode].append(result[mode] / result[BASELINE])
        print(f"  repeat {i + 1}: " + "   ".join(f"{m} {result[m]:7.0f}" for m in names) + " samples/s", flush=True)
    for mode, values in ratios.items():
        print(f"{mode}/{BASELINE} throughput: median {statistics.median(values):.3f} "
              f"(min {min(values):.3f}, max {max(values):.3f})")
    for mode, values in spy_cpu.items():
        if values:
            print(f"{mode}: py-spy's own CPU, share of one core: median {statistics.median(values):.3f}")
    if window:
        print(f"cprofile, in-run: median profiled step / unprofiled step (training process): "
              f"median {statistics.median(window):.2f} (min {min(window):.2f}, max {max(window):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
