"""What `profile --light` and `attach` cost a long job: its own step time with and without them, side by side.

    python benchmarks/long_jobs.py [--seconds S] [--repeats N] [--step-ms MS]

The job is ``tests/fixtures/attach_target.py`` with a step of ``--step-ms``
(default 100 ms: a sleep after backward, the injected compute) and a cheap
loader (2 workers, 1 ms of collate), so the loader never makes it wait and the
step time is the loop's own. Each repeat runs it once per mode, in rotating
order, for ``--seconds``:

* ``plain``: ``python attach_target.py`` alone: the baseline;
* ``light``: under ``pipeprof profile --light 10`` (the hooks, and the windows
  cut in the profiling process);
* ``attached``: alone, with ``pipeprof attach PID`` sampling it from its 4th
  second to its end (py-spy at 50 Hz, non-blocking).

The job times itself (its log: time.time() around each step); the first 5
seconds are left out (start-up, the attach's own start). Printed: per mode
the median over repeats of its mean step time over the baseline's, as the
overhead in % of a step, against the target of 0.5 % for ``light``. Ratios of
runs made side by side on one machine, not times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "fixtures" / "attach_target.py"
SKIP_S = 5.0
LIGHT_TARGET = 0.005


def _job(seconds: float, step_ms: float, log: Path) -> list[str]:
    return [str(JOB), "--seconds", str(seconds), "--compute-ms", str(step_ms), "--collate-ms", "1",
            "--num-workers", "2", "--log", str(log)]


def _mean_step_s(log: Path) -> float:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]
    start = rows[0]["t"] - rows[0]["batch_time"]
    kept = [r["batch_time"] for r in rows if r["t"] - start >= SKIP_S]
    return statistics.fmean(kept)


def run_mode(mode: str, seconds: float, step_ms: float, folder: Path) -> float:
    log = folder / f"{mode}.jsonl"
    env_py = [sys.executable]  # pipeprof from this checkout (the benchmark runs from the repository root)
    if mode == "light":
        subprocess.run([*env_py, "-m", "pipeprof", "profile", "--light", "10", "--quiet", "-o", str(folder / "runs"),
                        "--", sys.executable, *_job(seconds, step_ms, log)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
    elif mode == "attached":
        job = subprocess.Popen([*env_py, *_job(seconds, step_ms, log)])
        time.sleep(4.0)
        subprocess.run([*env_py, "-m", "pipeprof", "attach", str(job.pid), "--seconds", str(max(1.0, seconds - 6)),
                        "--quiet", "-o", str(folder / "runs")], cwd=ROOT, stdout=subprocess.DEVNULL)
        job.wait()
    else:
        subprocess.run([*env_py, *_job(seconds, step_ms, log)], check=True)
    return _mean_step_s(log)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=100.0)
    args = p.parse_args()
    modes = ["plain", "light", "attached"]
    ratios: dict[str, list[float]] = {m: [] for m in modes[1:]}
    with tempfile.TemporaryDirectory(prefix="pipeprof-longjobs-") as tmp:
        for r in range(args.repeats):
            order = modes[r % 3:] + modes[:r % 3]
            means = {m: run_mode(m, args.seconds, args.step_ms, _fresh(Path(tmp) / f"{r}-{m}")) for m in order}
            for m in ratios:
                ratios[m].append(means[m] / means["plain"])
            print(f"repeat {r + 1}: " + ", ".join(f"{m} {1000 * means[m]:.2f} ms" for m in modes), flush=True)
    for m, values in ratios.items():
        overhead = statistics.median(values) - 1
        target = f" (target {100 * LIGHT_TARGET:.1f}%)" if m == "light" else ""
        print(f"{m}: step time {100 * overhead:+.2f}% of the plain job's{target}; repeats "
              + ", ".join(f"{100 * (v - 1):+.2f}%" for v in values))
    return 0


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True)
    return folder


if __name__ == "__main__":
    sys.exit(main())
