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
noise of two runs, and the grid's best is the largest of many noisy points
(biased up by its luckiest window).

``--recheck N`` then runs the grid's best setting and the tuner's best
setting N times more each, alternately, each a fresh ``pipeprof run`` until
steady or ``--grid-seconds``: the *setting ratio* (median over median) compares
the two choices with the same measurement and no winner's curse, and the
spread of each side's repeats is the noise printed beside it. ``--repeats N``
runs the whole comparison (grid, tuner, recheck) N times. ``--plain`` also
runs the plain search (``Budget(finalists=0)``: no confirmations, no final
round, the tuner before issue 17) right after the tuner, side by side.
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

DEFAULT_SCENARIOS: tuple[tuple[str, list[str]], ...] = (
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
    parser.add_argument("--recheck", type=int, default=0, metavar="N",
                        help="re-run the grid's and the tuner's best settings N times each, alternately")
    parser.add_argument("--repeats", type=int, default=1, metavar="N", help="the whole comparison N times")
    parser.add_argument("--plain", action="store_true",
                        help="also run the plain search (no confirmations, no final round) beside the tuner")
    args = parser.parse_args(argv)
    plan = [(s, list(args.overrides)) for s in args.scenarios] or [(s, o + args.overrides)
                                                                   for s, o in DEFAULT_SCENARIOS]
    cores = usable_cores()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pipeprof-tune-bench-") as tmp:
        for repeat, (scenario, overrides) in ((r, p) for r in range(args.repeats) for p in plan):
            sets = [a for o in overrides for a in ("--set", o)]
            storage = _storage(scenario, overrides)
            grid = ["--grid", f"loader.num_workers={','.join(map(str, range(5)))}",
                    "--grid", f"train.threads={','.join(map(str, range(1, cores + 1)))}",
                    *([] if args.keep_storage else ["--grid", f"data.storage={PLACEMENT[storage]}"])]
            out = Path(tmp) / f"{Path(scenario).stem}-{repeat}"
            g_s, g_doc = _pipeprof(["sweep", scenario, *sets, *grid, "--max-seconds", str(args.grid_seconds)],
                                   out / "grid", args.cache, "sweep.json")
            keep = ["--keep-storage"] if args.keep_storage else []
            t_s, t_doc = _pipeprof(["tune", scenario, *sets, *keep], out / "tune", args.cache, "tune.json")
            if args.plain:
                p_s, p_doc = _pipeprof_plain(scenario, overrides, args.keep_storage, out / "plain", args.cache)
            g_best = (g_doc.get("best") or {}).get("samples_per_s")
            t_best = (t_doc.get("best") or {}).get("samples_per_s")
            row = {"scenario": Path(scenario).stem, "grid_best": g_best, "grid_best_label": (g_doc.get("best") or {})
                   .get("label"), "grid_s": g_s, "grid_points": len(g_doc.get("points") or []),
                   "tune_best": t_best, "tune_best_label": (t_doc.get("best") or {}).get("label"), "tune_s": t_s,
                   "tune_trials": sum(p["index"] >= 0 and p["status"] != "skipped" for p in t_doc.get("points") or []),
                   "best_ratio": t_best / g_best if t_best and g_best else None, "time_ratio": t_s / g_s}
            if args.plain:
                p_best = (p_doc.get("best") or {}).get("samples_per_s")
                row.update(plain_best=p_best, plain_best_label=(p_doc.get("best") or {}).get("label"), plain_s=p_s,
                           plain_best_ratio=p_best / g_best if p_best and g_best else None,
                           plain_time_ratio=p_s / g_s)
            if args.recheck and g_doc.get("best") and t_doc.get("best"):
                row.update(_recheck(scenario, sets, g_doc["best"]["settings"], t_doc["best"]["settings"],
                                    args.recheck, args.grid_seconds, out / "recheck", args.cache))
            rows.append(row)
            print(f"{row['scenario']}: grid best {g_best or 0:,.0f} samples/s ({row['grid_best_label']}) in "
                  f"{g_s:.0f} s over {row['grid_points']} points; tuner best {t_best or 0:,.0f} "
                  f"({row['tune_best_label']}) in {t_s:.0f} s with {row['tune_trials']} trials", flush=True)
            print(f"  best ratio {_r(row['best_ratio'])} (target >= 0.95: {_met(row['best_ratio'], 0.95, True)}), "
                  f"time ratio {row['time_ratio']:.2f} (target <= 0.33: {_met(row['time_ratio'], 1 / 3, False)})"
                  + (f"; setting ratio {_r(row['setting_ratio'])} (the two choices re-run {args.recheck}x each: "
                     f"grid's {_spread(row['recheck_grid'])}, tuner's {_spread(row['recheck_tune'])})"
                     if args.recheck else ""), flush=True)
            if args.plain:
                print(f"  plain search: best {row['plain_best'] or 0:,.0f} ({row['plain_best_label']}) in "
                      f"{row['plain_s']:.0f} s -> best ratio {_r(row['plain_best_ratio'])}, time ratio "
                      f"{row['plain_time_ratio']:.2f}", flush=True)
    ok = [r for r in rows if r["best_ratio"] is not None]
    if ok:
        best = statistics.median(r["best_ratio"] for r in ok)
        took = statistics.median(r["time_ratio"] for r in ok)
        print(f"\nmedian best ratio {best:.2f} (target >= 0.95: {_met(best, 0.95, True)}), "
              f"median time ratio {took:.2f} (target <= 0.33: {_met(took, 1 / 3, False)}); "
              f"best ratios {' '.join(_r(r['best_ratio']) for r in ok)}, "
              f"time ratios {' '.join(_r(r['time_ratio']) for r in ok)}")
        settings = [r["setting_ratio"] for r in ok if r.get("setting_ratio") is not None]
        if settings:
            print(f"median setting ratio {statistics.median(settings):.2f} "
                  f"({' '.join(_r(v) for v in settings)})")
    print(json.dumps(rows, indent=1))
    return 0 if ok else 1


PLAIN = """
import sys
from pathlib import Path
from pipeprof.pipeline.tune import Budget, tune
from pipeprof.scenario import load_scenario
scenario_file, out, keep, *overrides = sys.argv[1:]
tune(load_scenario(scenario_file, overrides), scenario_file=Path(scenario_file), overrides=overrides, out=Path(out),
     budget=Budget(12, 4.0, 10.0, finalists=0), keep_storage=keep == "1")
"""


def _pipeprof_plain(scenario: str, overrides: list[str], keep: bool, out: Path, cache: str | None) -> tuple[float, dict]:
    """The plain search (``Budget(finalists=0)``: the tuner before the final round) with the CLI's defaults."""
    env = dict(os.environ, **({"PIPEPROF_CACHE": cache} if cache else {}))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", PLAIN, scenario, str(out), "1" if keep else "0", *overrides],
                          capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent)
    took = time.monotonic() - start
    docs = sorted(out.glob("*/tune.json")) if out.exists() else []
    if not docs:
        print(f"  plain tune: no tune.json (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        return took, {}
    return took, json.loads(docs[-1].read_text())


def _recheck(scenario: str, sets: list[str], grid: dict, tuned: dict, n: int, seconds: float, out: Path,
             cache: str | None) -> dict:
    """The grid's and the tuner's best settings run ``n`` times each, alternately, in fresh processes."""
    runs: dict[str, list[float]] = {"grid": [], "tune": []}
    for i in range(n):
        for side, settings in (("grid", grid), ("tune", tuned))[:: 1 if i % 2 == 0 else -1]:
            change = [a for k, v in settings.items() if v is not None for a in ("--set", f"{k}={_toml(v)}")]
            steady = ["--set", "train.steady=true", "--set", f"train.max_seconds={seconds}",
                      "--set", "train.steps=5000"]
            _, doc = _pipeprof(["run", scenario, *sets, *change, *steady], out / f"{side}-{i}", cache,
                               "summary.json")
            if doc.get("samples_per_s"):
                runs[side].append(doc["samples_per_s"])
    g, t = runs["grid"], runs["tune"]
    return {"recheck_grid": g, "recheck_tune": t,
            "setting_ratio": statistics.median(t) / statistics.median(g) if g and t else None}


def _toml(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else \
        (f'"{value}"' if isinstance(value, str) else str(value))


def _r(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _met(value: float | None, target: float, at_least: bool) -> str:
    if value is None:
        return "not measured"
    return "met" if (value >= target if at_least else value <= target) else "missed"


def _spread(rates: list[float]) -> str:
    if not rates:
        return "none"
    return f"median {statistics.median(rates):,.0f}, {min(rates):,.0f}-{max(rates):,.0f}"


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
