"""``make bench``: run every benchmark, one after the other, and write BENCHMARKS.md with what they measured.

    python benchmarks/publish.py [--quick] [--only NAME[,NAME...]] [--output BENCHMARKS.md]

Each benchmark runs in its own process, alone (nothing else of ours on the
machine), and reports ratios measured side by side in that one invocation.
BENCHMARKS.md gets the machine (CPU, cores, memory, torch, GPU or why none,
the load average before each benchmark), the commit, and per benchmark: what
it measures and how (the benchmark's own docstring), the exact command, how
long it took, and its output as printed. ``--quick`` runs fewer repeats (a
smaller, noisier sample, said so in the file); ``--only`` runs some of them
and keeps the other sections of an existing BENCHMARKS.md as they were.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> (title, arguments, arguments with --quick)
BENCHMARKS = {
    "overhead": ("Profiler overhead: scenarios and scripts", [], ["--repeats", "3"]),
    "overheadsplit": ("Where the fastest loop's overhead goes", [], ["--repeats", "3", "--epochs", "4"]),
    "attribution": ("Attribution error on the ground-truth cases", [], ["--repeats", "1"]),
    "longrun": ("A long run: the profiler's memory and the report's render time", [], ["--hours", "0.25"]),
    "codeprofile": ("Cost of the code-level view (cProfile, py-spy)", [], ["--repeats", "2"]),
    "predict": ("How wrong the recommendations' predictions are", [], ["--workers", "0,2"]),
    "tune": ("Tuner efficiency against a full grid", [], ["--grid-seconds", "6"]),
    "startup": ("Start-up of the CLI and the end of a profiled run", [], ["--repeats", "3", "--script-repeats", "1"]),
    "transformcost": ("What timing inside the sample adds: transform calls, decode calls, a script's batches", [],
                      ["--repeats", "5"]),
    "insidecost": ("What timing inside the sample costs a scenario run", [], ["--repeats", "3"]),
    "faults": ("What the trust suites try: bad inputs, faults, damaged run folders", [], []),
    "suite": ("The test suite's time per tier", [], ["--tiers", "unit"]),
    "long_jobs": ("What `profile --light` and `attach` cost a long job's own step time", [],
                  ["--pairs", "2", "--seconds", "20", "--blocks", "10"]),
    "soak": ("A long job under `profile --light`: every step kept, memory and disk flat, a kill -9 survived", [],
             ["--seconds", "60"]),
    "sweep_check": ("Do the predictions hold on this machine? Three sweeps checked against themselves", [],
                    ["--repeats", "1"]),
    "advice_check": ("Does the advice hold on the user's own script? Applied and timed bare", [],
                     ["--repeats", "2"]),
}
SECTION = re.compile(r"^## (?P<name>[a-z_]+): ", re.MULTILINE)
GPU_CHECK = ROOT / "reports" / "gpu-check.json"  # make gpu-check's last result on this machine


def machine() -> list[str]:
    import psutil
    import torch

    from pipeprof.measure.environment import cpu_model, usable_cores
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CUDA not available)"
    return [f"- CPU: {cpu_model()}, {usable_cores()} usable cores ({os.cpu_count()} logical)",
            f"- memory: {psutil.virtual_memory().total / 2**30:.1f} GiB",
            f"- GPU: {gpu}",
            f"- Python {platform.python_version()}, torch {torch.__version__}, {platform.platform()}"]


def how(name: str) -> str:
    """The benchmark module's docstring, without its usage line."""
    doc = ast.get_docstring(ast.parse((ROOT / "benchmarks" / f"{name}.py").read_text())) or ""
    lines = [line for line in doc.splitlines() if not line.strip().startswith("python benchmarks/")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def run(name: str, quick: bool) -> str:
    title, args, quick_args = BENCHMARKS[name]
    command = [sys.executable, f"benchmarks/{name}.py", *(quick_args if quick else args)]
    load = os.getloadavg()[0]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    took_s = time.perf_counter() - started
    output = (proc.stdout + ("\n" + proc.stderr if proc.returncode else "")).strip()
    print(output, flush=True)
    status = "" if proc.returncode == 0 else f" — **exit status {proc.returncode}**"
    return (f"## {name}: {title}\n\n{how(name)}\n\n"
            f"`python {' '.join(command[1:])}`{' (quick: fewer repeats, noisier)' if quick else ''} — "
            f"{took_s / 60:.1f} min, load average {load:.2f} before it{status}\n\n"
            f"```\n{output}\n```\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats: faster, noisier")
    parser.add_argument("--only", default=None, help=f"comma-separated: {', '.join(BENCHMARKS)}; "
                                                      "none: only rewrite the file's head")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if not args.only else [] if args.only == "none" else args.only.split(",")
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    sections = _existing_sections(args.output)
    for name in names:
        sections[name] = run(name, args.quick)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = ["# Benchmarks", "",
            f"Written by `make bench` (`benchmarks/publish.py`) on {now}, commit `{commit}`; each section "
            "says how it was run (`--quick`: fewer repeats, noisier). Every figure is "
            "a ratio or an error measured side by side in one invocation on this machine, never an absolute time "
            "compared across runs. The machine is shared: medians over repeats, with their spread.", "",
            "Machine:", "", *machine(), ""]
    body = [sections.get(n) or f"## {n}: {BENCHMARKS[n][0]}\n\nNot measured in this file yet: "
            f"`python benchmarks/publish.py --only {n}` (or `make bench`).\n" for n in BENCHMARKS]
    body.append(gpu_check_section(GPU_CHECK))
    if HISTORY in sections:  # earlier measurements, written by hand: never rewritten here
        body.append(sections[HISTORY])
    args.output.write_text("\n".join(head) + "\n" + "\n".join(body))
    print(f"wrote {args.output}")
    return 0


HISTORY = "history"


def gpu_check_section(path: Path) -> str:
    """``make gpu-check``'s last result here (``reports/gpu-check.json``) as a table with the GPU's name, or
    why there is none: it is a check of every CUDA path, not a timed benchmark, so it is read, not run."""
    head = ("## gpucheck: every CUDA path on a GPU (`make gpu-check`)\n\n"
            "Read from `reports/gpu-check.json` when this file was written (what each check runs and asserts: "
            "the docs, *On a GPU*).\n\n")
    if not path.is_file():
        return head + "`make gpu-check` has not run on this machine: no `reports/gpu-check.json`.\n"
    doc = json.loads(path.read_text())
    if not doc.get("cuda"):
        return head + (f"Not run on a GPU: {doc.get('reason') or 'no CUDA device'}; every check was skipped.\n")
    checks = doc.get("checks") or []
    failed = sum(c.get("status") == "fail" for c in checks)
    rows = ["| check | status | detail |", "|---|---|---|"]
    rows += [f"| `{c.get('name')}` | {c.get('status')} | {str(c.get('detail') or '').replace('|', '/')} |"
             for c in checks]
    return head + (f"GPU: {doc.get('device')}; {len(checks) - failed} of {len(checks)} checks passed or "
                   f"skipped, {failed} failed.\n\n" + "\n".join(rows) + "\n")


def _existing_sections(path: Path) -> dict[str, str]:
    """The sections of an existing BENCHMARKS.md by benchmark name (kept when ``--only`` runs others)."""
    if not path.is_file():
        return {}
    text = path.read_text()
    starts = [(m.start(), m.group("name")) for m in SECTION.finditer(text)]
    sections = {name: text[start:(starts[i + 1][0] if i + 1 < len(starts) else len(text))].rstrip() + "\n"
                for i, (start, name) in enumerate(starts)}
    return {name: text for name, text in sections.items() if "Not measured in this file yet" not in text}


if __name__ == "__main__":
    sys.exit(main())
