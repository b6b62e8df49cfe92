"""Tuner efficiency: the tuner's best against an exhaustive grid's best, and its time against the grid's.

    python benchmarks/tune.py [SCENARIO ...] [--grid-seconds S] [--set KEY=VALUE ...]

For each scenario (default: three with different bottlenecks — decode-bound
JPEGs, storage-bound cold memmap, and in-RAM data made in the training
process) this runs, one after the other in one invocation:

* the grid: ``pipeprof sweep`` over num_workers 0..4 x torch threads
  1..cores x placement (as given, decoded in RAM, on the device), each point
  in a fresh process until steady or ``--grid-seconds``;
* the tuner: ``pipeprof tune`` with its defaults.

With ``--keep-storage`` neither moves the data (no placement axis, ``tune
--keep-storage``): on a CPU-only machine the on-device placement wins
everywhere, and this checks the search over loader and thread settings alone.

and prints per scenario the tuner's best (its confirmed run) as a fraction
of the grid's best, and the tuner's wall time as a fraction of the grid's.
Target: >= 0.95 of the grid's best in <= 1/3 of its time. prefetch_factor
and persistent_workers are left out of the grid to keep it affordable (the
tuner may still use them, which can only help it). Both sides are single
measurements on a shared machine: the best-ratio carries the run-to-run
noise of two runs (about ±15% here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.measure.environment import usable_cores  # noqa: E402

DEFAULT_SCENARIOS = (
    ("scenarios/jpeg-decode.toml", ["data.samples=6000"]),
    ("scenarios/memmap-cold-0workers.toml", []),
    ("scenarios/quick.toml", []),
)
PLACEMENT = {"images": "images,ram,device", "memmap": "memmap,ram,device", "files": "files,ram,device",
             "ram": "ram,device", "device": "device"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*")
    parser.add_argument("--grid-seconds", type=float, default=10.0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--cache", default=None)
    parser.add_argument("--keep-storage", action="store_true",
                        help="neither grid nor tuner moves the data (no RAM or device placement)")
    args = parser.parse_args(argv)
    plan = [(s, list(args.overrides)) for s in args.scenarios] or [(s, o + args.overrides)
                                                                   for s, o in DEFAULT_SCENARIOS]
    cores = usable_cores()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pipeprof-tune-bench-") as tmp:
        for scenario, overrides in plan:
            sets = [a for o in overrides for a in ("--set", o)]
            storage = _storage(scenario, overrides)
            grid = ["--grid", f"loader.num_workers={','.join(map(str, range(5)))}",
                    "--grid", f"train.threads={','.join(map(str, range(1, cores + 1)))}",
                    *([] if args.keep_storage else ["--grid", f"data.storage={PLACEMENT[storage]}"])]
            out = Path(tmp) / Path(scenario).stem
            g_s, g_doc = _pipeprof(["sweep", scenario, *sets, *grid, "--max-seconds", str(args.grid_seconds)],
                                   out / "grid", args.cache, "sweep.json")
            keep = ["--keep-storage"] if args.keep_storage else []
            t_s, t_doc = _pipeprof(["tune", scenario, *sets, *keep], out / "tune", args.cache, "tune.json")
            g_best = (g_doc.get("best") or {}).get("samples_per_s")
            t_best = (t_doc.get("best") or {}).get("samples_per_s")
            row = {"scenario": Path(scenario).stem, "grid_best": g_best, "grid_best_label": (g_doc.get("best") or {})
                   .get("label"), "grid_s": g_s, "grid_points": len(g_doc.get("points") or []),
                   "tune_best": t_best, "tune_best_label": (t_doc.get("best") or {}).get("label"), "tune_s": t_s,
                   "tune_trials": sum(p["index"] >= 0 and p["status"] != "skipped" for p in t_doc.get("points") or []),
                   "best_ratio": t_best / g_best if t_best and g_best else None, "time_ratio": t_s / g_s}
            rows.append(row)
            print(f"{row['scenario']}: grid best {g_best or 0:,.0f} samples/s ({row['grid_best_label']}) in "
                  f"{g_s:.0f} s over {row['grid_points']} points; tuner best {t_best or 0:,.0f} "
                  f"({row['tune_best_label']}) in {t_s:.0f} s with {row['tune_trials']} trials -> best ratio "
                  f"{row['best_ratio'] or 0:.2f}, time ratio {row['time_ratio']:.2f}", flush=True)
    ok = [r for r in rows if r["best_ratio"] is not None]
    if ok:
        print(f"\nmedian best ratio {statistics.median(r['best_ratio'] for r in ok):.2f} (target >= 0.95), "
              f"median time ratio {statistics.median(r['time_ratio'] for r in ok):.2f} (target <= 0.33)")
    print(json.dumps(rows, indent=1))
    return 0 if ok else 1


def _pipeprof(cmd: list[str], out: Path, cache: str | None, name: str) -> tuple[float, dict]:
    full = [sys.executable, "-m", "pipeprof", *cmd, "--out", str(out), "--quiet"]
    if cache:
        full += ["--cache", cache]
    start = time.monotonic()
    proc = subprocess.run(full, capture_output=True, text=True, env=dict(os.environ))
    took = time.monotonic() - start
    docs = sorted(out.glob(f"*/{name}")) if out.exists() else []
    if not docs:
        print(f"  {' '.join(cmd[:2])}: no {name} (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        return took, {}
    return took, json.loads(docs[-1].read_text())


def _storage(scenario: str, overrides: list[str]) -> str:
    from pipeprof.scenario import load_scenario
    return load_scenario(scenario, overrides).data.storage


if __name__ == "__main__":
    sys.exit(main())
