"""Where the fastest loop's overhead goes: ``plain_loop.py`` bare and under the profiler piece by piece, interleaved.

    python benchmarks/overheadsplit.py [--repeats N] [--epochs N]

One repeat runs the fixture ``tests/fixtures/plain_loop.py`` (a ~1 ms step,
no workers, one torch thread: the worst case for a per-step cost) once in each
of these ways, in rotating order:

* ``bare``: ``python plain_loop.py``;
* ``hooks``: ``python -m pipeprof.script.boot plain_loop.py`` with only an
  event file named: the hooks in the script's process, no sampler, no
  pipeprof process beside it;
* ``profiled, sampler 0.2 Hz``: ``pipeprof profile --sample-hz 0.2``: all of
  the above plus pipeprof's own process and the start-up hook, its sampler
  nearly idle;
* ``profiled``: ``pipeprof profile`` as a user runs it (10 Hz).

Each prints its own throughput after its first 5 optimizer steps (the same
code on every side). The ratios of neighbours split the cost: hooks/bare is
the in-process share, sampler-0.2-Hz/hooks pipeprof's process and start-up,
profiled/sampler-0.2-Hz the sampler's. Each run also gives its children's
CPU seconds, involuntary context switches and minor page faults
(``getrusage``), per 1000 samples, where the share is not in the hooks.
Medians over repeats; ratios measured side by side in one invocation.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "fixtures" / "plain_loop.py"


def variants(out: str, events: str, epochs: int) -> dict[str, tuple[list[str], dict[str, str]]]:
    args = [str(SCRIPT), "--epochs", str(epochs), "--samples", "8192", "--threads", "1"]
    py = sys.executable
    profile = [py, "-m", "pipeprof", "profile", "--quiet", "--out", out]
    return {
        "bare": ([py, *args], {}),
        "hooks": ([py, "-m", "pipeprof.script.boot", *args], {"PIPEPROF_EVENTS": events}),
        "profiled, sampler 0.2 Hz": ([*profile, "--sample-hz", "0.2", "--", py, *args], {}),
        "profiled": ([*profile, "--", py, *args], {}),
    }


def measure(command: list[str], env: dict[str, str]) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, **env), check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = re.findall(r"^throughput: ([0-9.]+) samples/s", proc.stdout, re.MULTILINE)
    steps = re.findall(r"^steps: ([0-9]+)", proc.stdout, re.MULTILINE)
    if not found or not steps:
        raise RuntimeError(f"no throughput line from {' '.join(command)}: {proc.stdout[-300:]} {proc.stderr[-300:]}")
    per_k = 1000 / (int(steps[-1]) * 64)
    return {"samples_per_s": float(found[-1]),
            "cpu_s_per_k": (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * per_k,
            "nivcsw_per_k": (after.ru_nivcsw - before.ru_nivcsw) * per_k,
            "minflt_per_k": (after.ru_minflt - before.ru_minflt) * per_k}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pipeprof-parts-") as out:
        ways = variants(out, str(Path(out) / "events.jsonl"), args.epochs)
        names = list(ways)
        rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        print(f"plain_loop.py, {args.repeats} repeats, rotating order ({os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.2f} before)")
        for i in range(args.repeats):
            order = names[i % len(names):] + names[: i % len(names)]
            got = {n: measure(*ways[n]) for n in order}
            for n in names:
                rows[n].append(got[n])
            print(f"  repeat {i + 1}: " + "   ".join(f"{n} {got[n]['samples_per_s']:7.0f}" for n in names))
    bare = [r["samples_per_s"] for r in rows["bare"]]
    print(f"{'way':26s} {'x bare':>7s} {'x prev':>7s} {'cpu s/1k':>9s} {'nivcsw/1k':>10s} {'minflt/1k':>10s}")
    previous = bare
    for n in names:
        rates = [r["samples_per_s"] for r in rows[n]]
        to_bare = statistics.median(a / b for a, b in zip(rates, bare, strict=True))
        to_prev = statistics.median(a / b for a, b in zip(rates, previous, strict=True))
        med = {k: statistics.median(r[k] for r in rows[n]) for k in ("cpu_s_per_k", "nivcsw_per_k", "minflt_per_k")}
        print(f"{n:26s} {to_bare:7.3f} {to_prev:7.3f} {med['cpu_s_per_k']:9.4f} {med['nivcsw_per_k']:10.1f} "
              f"{med['minflt_per_k']:10.1f}")
        previous = rates
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
