"""What `profile --light` and `attach` cost a long job: the hooks' own cost per step, and the job's step time.

    python benchmarks/long_jobs.py [--pairs N] [--seconds S] [--step-ms MS] [--blocks B] [--no-attached]

The target is the light mode's: at most 0.5 % of a 100 ms step, i.e. 500 µs.
Two measurements, so that the claim does not rest on the difference of two
noisy wall times alone:

1. **In process, direct.** The per-step path of the hooks `--light` runs
   under (``script.hooks``, as ``pipeprof profile`` installs them) timed
   inside one process: a minimal training step (a batch from a DataLoader
   with ``num_workers = 0``, so the fetch and collate hooks run on the
   training thread too: the most a step can pay; a tiny MLP's forward,
   backward and optimizer step) in blocks of steps, with the hooks and
   without, interleaved (A B, B A, ...). Per pair: the hooked block's mean
   step less the plain block's; printed: the median over pairs in µs and as
   a share of a ``--step-ms`` step, with the quartiles, for the blocks' mean
   step (what a job pays, periodic costs included) and their median step
   (robust to a step the shared machine delayed). Beside it, the cost of
   cutting one window (``measure.light``: reading the window's events,
   cutting them into steps, the aggregate) of ``10 s / --step-ms`` such
   steps, per step: it runs in the profiling process (the CLI) or in a thread
   of the training process (the API).
2. **End to end.** ``tests/fixtures/attach_target.py`` with a step of
   ``--step-ms`` (mostly a sleep after backward, the injected compute, and a
   little real work: the MLP's step, and the batch made in the training
   process with 1 ms of collate: no worker's scheduling on the shared machine
   in the step, and every hook on the training thread, the most a step
   pays), run for ``--seconds`` in pairs interleaved
   (plain, light; then light, plain; ...): ``plain`` alone, ``light`` under
   ``pipeprof profile --light 10``. The job times its own steps (its log:
   time.time() around each); the first 5 seconds are left out (start-up).
   Per pair: light's mean step less plain's, and its median step less
   plain's; printed: the median over pairs in µs and as a share of the step,
   the spread, and the standard error of one run's mean step (the resolution
   a pair's mean can have; the median step is steadier on a shared machine). ``attached`` (unless
   ``--no-attached``): the job alone with ``pipeprof attach PID`` sampling it
   from its 4th second to its end (py-spy at 50 Hz, non-blocking), one per
   pair, against the same pair's plain run. Beside the step times:
   pipeprof's own CPU seconds per step over the job's steady middle, from
   its 11th second to 5 seconds before its end (its process and what it
   started, the job left out: the sampler, the window cuts, py-spy), what it
   takes from cores a busy machine would give the job.

Differences of runs made side by side on one machine, never times compared
across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
JOB = ROOT / "tests" / "fixtures" / "attach_target.py"
SKIP_S = 5.0
LIGHT_TARGET = 0.005
WINDOW_S = 10.0  # the windows' length the end-to-end runs use (profile --light 10)


# -- 1. in process ---------------------------------------------------------------------------------


class HookedLoop:
    """A minimal training loop, timed per block of steps, with the light mode's hooks or without."""

    def __init__(self, folder: Path) -> None:
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(0)
        torch.set_num_threads(1)
        data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
        self.loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)
        self.model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.loss_fn = nn.CrossEntropyLoss()
        self.events = folder / "events.jsonl"
        self._batches = iter(self.loader)

    def _next(self):
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.loader)
            return next(self._batches)

    def block_s(self, steps: int) -> tuple[float, float]:
        """The mean and the median seconds per step over ``steps`` steps (the median: robust to a step the
        shared machine preempted; the mean: what a job pays, periodic costs such as a flush included)."""
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            x, y = self._next()
            loss = self.loss_fn(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            times.append(time.perf_counter() - t0)
        return statistics.fmean(times), statistics.median(times)

    def hooked(self, run: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        """``run()`` with the hooks installed, as ``pipeprof profile`` installs them (a fresh pass: the hooks
        see the loader's iter())."""
        from pipeprof.script.hooks import EventLog, Hooks

        hooks = Hooks(EventLog(str(self.events)))
        hooks.install()
        self._batches = iter(self.loader)
        try:
            return run()
        finally:
            hooks.uninstall()
            self._batches = iter(self.loader)


def hook_cost(folder: Path, blocks: int, steps: int) -> tuple[list[float], list[float], float]:
    """Per pair of blocks (order alternating): the hooked mean step less the plain one, and the same of their
    median steps, in seconds; and the plain step's median."""
    loop = HookedLoop(folder)
    loop.block_s(steps)  # warm both paths once
    loop.hooked(lambda: loop.block_s(steps))
    means, medians, plain_s = [], [], []
    for i in range(blocks):
        if i % 2:
            hooked = loop.hooked(lambda: loop.block_s(steps))
            plain = loop.block_s(steps)
        else:
            plain = loop.block_s(steps)
            hooked = loop.hooked(lambda: loop.block_s(steps))
        means.append(hooked[0] - plain[0])
        medians.append(hooked[1] - plain[1])
        plain_s.append(plain[1])
    return means, medians, statistics.median(plain_s)


def window_cut_cost(folder: Path, steps_per_window: int, windows: int) -> list[float]:
    """Seconds to read, cut and aggregate each window of ``steps_per_window`` hooked steps (``measure.light``)."""
    from pipeprof.measure.light import EventTail, LightWindows, window_aggregate

    loop = HookedLoop(folder)
    loop.events.unlink(missing_ok=True)
    tail, cutter = EventTail(loop.events), LightWindows(time.perf_counter(), 0)
    costs = []

    def run() -> tuple[float, float]:
        last_s = 0.0
        for _ in range(windows):
            loop.block_s(steps_per_window)
            t0 = time.perf_counter()
            steps, loading = cutter.steps(tail.read_new())
            window_aggregate(steps, loading, t_start_s=last_s, t_end_s=t0 - cutter.t0_s)
            last_s = t0 - cutter.t0_s
            costs.append(time.perf_counter() - t0)
        return 0.0, 0.0

    loop.hooked(run)
    return costs[1:]  # the first window also reads the loader's registration


# -- 2. end to end ---------------------------------------------------------------------------------


def _job(seconds: float, step_ms: float, log: Path) -> list[str]:
    return [str(JOB), "--seconds", str(seconds), "--compute-ms", str(step_ms), "--collate-ms", "1",
            "--num-workers", "0", "--log", str(log)]


def _steps_s(log: Path) -> list[float]:
    """The step times after the first SKIP_S seconds."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]
    rows = [r for r in rows if "t" in r]
    start = rows[0]["t"] - rows[0]["batch_time"]
    return [r["batch_time"] for r in rows if r["t"] - start >= SKIP_S]


def _pipeprof_cpu_s(mode: str, pid: int) -> float:
    """CPU seconds of pipeprof's process (every thread), and under attach of the py-spy runs it started (ended
    and running); under profile the job is its child, and left out."""
    proc = psutil.Process(pid)
    t = proc.cpu_times()
    cpu_s = t.user + t.system
    if mode == "attached":
        cpu_s += t.children_user + t.children_system
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                cpu_s += c.user + c.system
    return cpu_s


def _rows(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith('{"t"')) if log.exists() else 0


def run_mode(mode: str, seconds: float, step_ms: float, folder: Path) -> tuple[list[float], float | None]:
    """The job's own step times (s) in ``mode`` after the first SKIP_S seconds, and pipeprof's own CPU seconds
    per step while the job ran steadily (its process and what it started but the job: the sampler, the window
    cuts, py-spy; None for plain)."""
    folder.mkdir(parents=True)
    log = folder / "job.jsonl"
    py = [sys.executable]  # pipeprof from this checkout (the benchmark runs from the repository root)
    job: subprocess.Popen | None = None
    if mode == "light":
        watched = subprocess.Popen([*py, "-m", "pipeprof", "profile", "--light", f"{WINDOW_S:g}", "--quiet", "-o",
                                    str(folder / "runs"), "--", sys.executable, *_job(seconds, step_ms, log)],
                                   cwd=ROOT, stdout=subprocess.DEVNULL)
    elif mode == "attached":
        job = subprocess.Popen([*py, *_job(seconds, step_ms, log)])
        time.sleep(4.0)
        watched = subprocess.Popen([*py, "-m", "pipeprof", "attach", str(job.pid), "--seconds",
                                    str(max(1.0, seconds - 6)), "--quiet", "-o", str(folder / "runs")], cwd=ROOT,
                                   stdout=subprocess.DEVNULL)
    else:
        watched = subprocess.Popen([*py, *_job(seconds, step_ms, log)])
    per_step = None
    # pipeprof's CPU over the job's steady middle: after its first window (the first cut warms what later ones
    # reuse) and before its end (the report)
    first_s = WINDOW_S + 1.0
    if mode != "plain" and seconds - first_s - 5.0 >= 2.0:  # an attach ends 2 s before the job
        while _rows(log) == 0 and watched.poll() is None:
            time.sleep(0.1)
        time.sleep(first_s)
        cpu_s, rows = _pipeprof_cpu_s(mode, watched.pid), _rows(log)
        time.sleep(seconds - first_s - 5.0)
        if watched.poll() is None:
            per_step = (_pipeprof_cpu_s(mode, watched.pid) - cpu_s) / max(_rows(log) - rows, 1)
    if watched.wait() != 0:
        raise SystemExit(f"{mode}: exit status {watched.returncode}")
    if job is not None:
        job.wait()
    return _steps_s(log), per_step


# -- printing --------------------------------------------------------------------------------------


def _spread_us(values_s: list[float]) -> str:
    us = sorted(v * 1e6 for v in values_s)
    if len(us) >= 4:
        q = statistics.quantiles(us, n=4)
        return f"quartiles {q[0]:+.1f} … {q[2]:+.1f} µs, range {us[0]:+.1f} … {us[-1]:+.1f} µs"
    return "values " + ", ".join(f"{v:+.1f}" for v in us) + " µs"


def _share(value_s: float, step_ms: float) -> str:
    return f"{100 * value_s / (step_ms / 1e3):+.3f}% of a {step_ms:g} ms step"


def _overhead_line(name: str, diffs_s: list[float], step_ms: float, target: bool = True) -> str:
    median = statistics.median(diffs_s)
    verdict = "within" if median <= LIGHT_TARGET * step_ms / 1e3 else "OVER"
    against = f" ({verdict} the {100 * LIGHT_TARGET:.1f}% target)" if target else ""
    return (f"{name}: median {median * 1e6:+.1f} µs per step = {_share(median, step_ms)}{against}; "
            f"{len(diffs_s)} pairs, {_spread_us(diffs_s)}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=6, help="end-to-end pairs of runs (plain, light)")
    p.add_argument("--seconds", type=float, default=30.0, help="each end-to-end run's length")
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--blocks", type=int, default=40, help="in-process pairs of blocks")
    p.add_argument("--block-steps", type=int, default=200, help="steps per in-process block")
    p.add_argument("--no-attached", dest="attached", action="store_false", help="no attached run per pair")
    args = p.parse_args()
    per_window = max(1, round(WINDOW_S / (args.step_ms / 1e3)))
    with tempfile.TemporaryDirectory(prefix="pipeprof-longjobs-") as tmp:
        hooks, hooks_median, plain_s = hook_cost(Path(tmp), args.blocks, args.block_steps)
        what = f"in process, the hooks' path ({args.block_steps}-step blocks, 0 workers; plain step {plain_s * 1e6:.0f} µs)"
        print(_overhead_line(f"{what}, mean step", hooks, args.step_ms), flush=True)
        print(_overhead_line(f"{what}, median step", hooks_median, args.step_ms), flush=True)
        cuts = window_cut_cost(Path(tmp), per_window, 6)
        cut = statistics.median(cuts)
        print(f"in process, cutting a {WINDOW_S:g} s window ({per_window} steps): median {cut * 1e3:.2f} ms "
              f"(range {min(cuts) * 1e3:.2f} … {max(cuts) * 1e3:.2f}) = {cut / per_window * 1e6:.1f} µs per step "
              f"= {_share(cut / per_window, args.step_ms)} (the profiling process's with the CLI, a thread of "
              "the training process's with the API)", flush=True)
        total = statistics.median(hooks) + cut / per_window
        print(f"in process, both: {total * 1e6:+.1f} µs per step = {_share(total, args.step_ms)}", flush=True)
        diffs: dict[str, list[float]] = {}  # "light mean" -> per pair, light's mean step less plain's (s)
        errors: list[float] = []
        cpu: dict[str, list[float]] = {}  # per pair, pipeprof's own CPU seconds per step in the mode
        for i in range(args.pairs):
            modes = ["plain", "light"] if i % 2 == 0 else ["light", "plain"]
            if args.attached:
                modes.append("attached")
            runs = {m: run_mode(m, args.seconds, args.step_ms, Path(tmp) / f"{i}-{m}") for m in modes}
            steps = {m: r[0] for m, r in runs.items()}
            errors += [statistics.stdev(s) / math.sqrt(len(s)) for s in steps.values() if len(s) > 1]
            for m in [x for x in modes if x != "plain"]:
                for stat, f in (("mean", statistics.fmean), ("median", statistics.median)):
                    diffs.setdefault(f"{m} {stat}", []).append(f(steps[m]) - f(steps["plain"]))
                if runs[m][1] is not None:
                    cpu.setdefault(m, []).append(runs[m][1])
            print(f"pair {i + 1}: " + ", ".join(f"{m} mean {1e3 * statistics.fmean(steps[m]):.3f} ms, median "
                                                f"{1e3 * statistics.median(steps[m]):.3f} ms ({len(steps[m])} steps)"
                                                for m in modes), flush=True)
        for key, values in diffs.items():
            mode, stat = key.split()
            print(_overhead_line(f"end to end, {mode} − plain, {stat} step", values, args.step_ms,
                                 target=mode == "light"))
        for m, values in cpu.items():
            print(f"end to end, {m}: pipeprof's own CPU per step (its processes beside the job, all cores) median "
                  f"{statistics.median(values) * 1e6:.0f} µs = {_share(statistics.median(values), args.step_ms)} "
                  f"of a core; {_spread_us(values)}")
        if errors:
            print(f"end to end, one run's mean step: standard error median {statistics.median(errors) * 1e6:.1f} µs "
                  "(its resolution: the median step is not moved by a step the shared machine delayed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
