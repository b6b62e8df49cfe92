"""What timing inside the sample (issue 18: each transform, the decode) costs a scenario run, as a ratio of samples/s.

The same scenario is trained with worker-side loading timing as ``pipeprof run``
does it (``LoadingRecorder``), with the inside-the-sample timing on (the
default) and off (the dataset's transform left untimed and its decode not
split out), runs interleaved, each side's samples/s after warm-up
(``ThroughputTimer``); prints the median of the per-pair ratios (off / on:
above 1 = the timing slows training) and the cost per sample in µs. Fast
scenarios are where it weighs most: RAM with ``normalize`` (one cheap leaf),
RAM with ``augment`` and images with ``augment`` (decode timed too).

    .venv/bin/python benchmarks/insidecost.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.measure import loading  # noqa: E402
from pipeprof.measure.loading import LoadingRecorder  # noqa: E402
from pipeprof.measure.steps import ThroughputTimer  # noqa: E402
from pipeprof.pipeline.train import build_workload, train_loop  # noqa: E402
from pipeprof.scenario import load_scenario  # noqa: E402

CASES = {"ram-normalize": ["data.storage=ram", "data.transform=normalize"],
         "ram-augment": ["data.storage=ram", "data.transform=augment"],
         "images-augment": ["data.storage=images", "data.transform=augment"]}


class Untimed(LoadingRecorder):
    """Loading timing as before issue 18: the transform not timed, the decode inside prep."""

    def wrap_dataset(self, dataset):  # type: ignore[no-untyped-def]
        decoder = type(dataset).decoder
        dataset.decoder = None  # an instance attribute hides the kind's own
        wrapped = loading.TimedDataset(dataset, self.clock, self.key, self.run_queue, self.cpu_clock)
        dataset.decoder = decoder
        return wrapped


def samples_per_s(overrides: list[str], recorder_type: type, cache: Path) -> float:
    scenario = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "quick.toml", overrides)
    recorder = recorder_type()
    work = build_workload(scenario, cache, recorder=recorder)
    timer = ThroughputTimer(recorder.clock, scenario.train.warmup_steps, None)
    train_loop(work, scenario.total_steps(), timer, recorder=recorder)
    return timer.samples_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="pipeprof-inside-"))
    for name, case in CASES.items():
        overrides = [*case, "data.samples=4000", f"train.steps={args.steps}", "train.warmup_steps=10",
                     f"loader.num_workers={args.workers}", "train.threads=1"]
        ratios, on_rates = [], []
        for _ in range(args.repeats):
            off = samples_per_s(overrides, Untimed, cache)
            on = samples_per_s(overrides, LoadingRecorder, cache)
            ratios.append(off / on)
            on_rates.append(on)
        ratio, rate = statistics.median(ratios), statistics.median(on_rates)
        print(f"{name}: timed inside at {rate:.0f} samples/s; untimed / timed = {ratio:.3f} "
              f"(pairs {', '.join(f'{r:.3f}' for r in ratios)}); ~{(ratio - 1) / rate * 1e6:.1f} µs a sample")


if __name__ == "__main__":
    main()
