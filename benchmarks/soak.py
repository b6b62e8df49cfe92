"""A long job under `profile --light`: every step in a window, pipeprof's memory and disk flat, a kill -9 survived.

    python benchmarks/soak.py [--seconds S] [--window S]

``tests/fixtures/attach_target.py`` trains a fast loop (0 workers, no injected cost: about 1 ms a step, so the
hooks' event file passes its 8 MiB trim several times in a few minutes) under ``pipeprof profile --light
--window``, and logs each of its own steps. Checked, beside it:

1. **Every step accounted for.** The windows' steps, plus the warm-up steps and the last step (still running
   at the last cut), against the steps the job logged.
2. **Flat.** pipeprof's own resident memory (the profiling process), sampled every second, first quarter
   against last; the event file's disk (its allocated blocks, not its length) at most one trim and a read's
   worth, however long it ran, while its length runs on.
3. **kill -9.** The same job again, pipeprof killed with SIGKILL halfway: ``pipeprof report`` on the folder it
   left rebuilds the run from every window written before the kill.

Prints one table; exit 1 when a check fails. Times on one machine, never compared across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "tests" / "fixtures" / "attach_target.py"
WARMUP_STEPS = 5  # pipeprof profile's default


def _start(out: Path, log: Path, seconds: float, window_s: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeprof", "profile", "--light", f"{window_s:g}", "--quiet",
                             "--out", str(out), "--", "python", str(TARGET), "--seconds", f"{seconds:g}",
                             "--num-workers", "0", "--collate-ms", "0", "--compute-ms", "0", "--log", str(log)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def _logged_steps(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if '"batch_time"' in line)


def _watch(proc: subprocess.Popen, out: Path, until_s: float | None = None) -> tuple[list[int], list[int], int]:
    """pipeprof's RSS and the event file's disk, every second, until ``proc`` ends (or ``until_s``); and the most
    the event file's length reached."""
    me = psutil.Process(proc.pid)
    rss, disk, length = [], [], 0
    started = time.monotonic()
    while proc.poll() is None and (until_s is None or time.monotonic() - started < until_s):
        time.sleep(1.0)
        try:
            rss.append(me.memory_info().rss)
        except psutil.Error:
            break
        for events in out.glob("*/recording/events.jsonl"):
            try:
                stat = events.stat()
            except FileNotFoundError:
                continue
            disk.append(stat.st_blocks * 512)
            length = max(length, stat.st_size)
    return rss, disk, length


def soak(seconds: float, window_s: float) -> list[tuple[str, str, bool]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "reports", Path(tmp) / "steps.jsonl"
        proc = _start(out, log, seconds, window_s)
        rss, disk, length = _watch(proc, out)
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"the light profile failed ({proc.returncode}): {err[-2000:]}")
        summary = json.loads((_folder(out) / "summary.json").read_text())
        windows = [json.loads(line) for line in (_folder(out) / "windows.jsonl").read_text().splitlines()]
        in_windows, logged = sum(int(w["steps"]) for w in windows), _logged_steps(log)
        accounted = in_windows + WARMUP_STEPS + 1  # the last step was still running at the last cut
        rows.append(("steps: in windows + warm-up + the last / logged by the job",
                     f"{in_windows:,} + {WARMUP_STEPS} + 1 = {accounted:,} / {logged:,} "
                     f"({len(windows)} windows; summary: {summary['steps']:,})", abs(accounted - logged) <= 1))
        quarter = max(1, len(rss) // 4)
        first, last = sum(rss[:quarter]) / quarter, sum(rss[-quarter:]) / quarter
        rows.append(("pipeprof's memory: first quarter -> last quarter (mean RSS)",
                     f"{first / 2**20:.1f} MiB -> {last / 2**20:.1f} MiB", last <= first * 1.10 + 8 * 2**20))
        most = max(disk) if disk else 0
        rows.append(("event file: its length at most / its disk at most",
                     f"{length / 2**20:.1f} MiB / {most / 2**20:.1f} MiB", length > 8 * 2**20 and most <= 12 * 2**20))
        # 3. kill -9 halfway, then report
        out, log = Path(tmp) / "killed", Path(tmp) / "killed.jsonl"
        proc = _start(out, log, seconds, window_s)
        _watch(proc, out, until_s=seconds / 2)
        folder = _folder(out)
        written = (folder / "recording" / "light" / "windows.jsonl").read_text().splitlines()
        job = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        psutil.wait_procs(job, timeout=30)  # the job ends with pipeprof (it dies with its parent)
        report = subprocess.run([sys.executable, "-m", "pipeprof", "report", "--quiet", str(folder)], cwd=ROOT,
                                capture_output=True, text=True)
        kept = (folder / "windows.jsonl").read_text().splitlines() if (folder / "windows.jsonl").is_file() else []
        rows.append(("kill -9 halfway, then report: windows kept / written before the kill",
                     f"{len(kept)} / {len(written)} (report exit {report.returncode})",
                     report.returncode == 0 and kept[:len(written)] == written and len(written) > 0))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=180.0, help="how long each job trains (default 180)")
    p.add_argument("--window", type=float, default=5.0, help="--light's window in seconds (default 5)")
    args = p.parse_args()
    rows = soak(args.seconds, args.window)
    print("| check | measured | holds |\n|---|---|---|")
    for what, measured, held in rows:
        print(f"| {what} | {measured} | {'yes' if held else 'NO'} |")
    return 0 if all(held for _, _, held in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
