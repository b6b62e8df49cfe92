"""What timing inside the sample (issue 18) adds per sample: transform calls, decode calls, a script's batches.

Issue 18, item 1: a cost small enough to stay on by default. Three parts,
each side by side in this one process, their repeats interleaved (the order
rotating), medians over the repeats with the spread of the per-repeat ratios:

1. Transform calls: a torchvision pipeline of cheap transforms on a small
   image (RandomHorizontalFlip, CenterCrop, Normalize, a Lambda: the case
   where timing costs the most in proportion), v1 and v2 Compose, called
   plain and timed (``measure.transforms.TransformTimer``): µs a sample
   each, what the timing adds per transform call, timed / plain.
2. Decode calls (``script.decode_hooks``): ``PIL.Image.open(png).convert("L")``
   of a 32×32 PNG and ``numpy.load`` of a small array, with the patches not
   installed, installed outside a fetch (pass-through) and inside a timed
   fetch (timed): µs a sample and what each adds.
3. A script's whole per-batch path: a DataLoader (batch 32, num_workers=0)
   over 32×32 images through a 4-transform v1 Compose, iterated in this
   process under the script hooks (``script.hooks.Hooks``) with the
   transform and decode timing on (the default) and off (the hooks'
   ``TransformHooks`` replaced by one that times nothing), and without the
   hooks: µs a sample, and on / off as a ratio of samples/s.
4. A real pipeline: an ImageNet-style v1 Compose (RandomResizedCrop(224),
   RandomHorizontalFlip, ToTensor, Normalize) on a 256x256 PIL image, plain
   and timed: what the timing weighs where a sample takes a millisecond.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.measure.transforms import TransformTimer  # noqa: E402
from pipeprof.script import decode_hooks, hooks  # noqa: E402
from pipeprof.script.patches import Patches  # noqa: E402
from pipeprof.script.transform_hooks import TransformHooks  # noqa: E402


def pipeline(t: Any) -> Any:
    return t.Compose([t.RandomHorizontalFlip(p=0.5), t.CenterCrop(24), t.Normalize(mean=[0.5] * 3, std=[0.25] * 3),
                      t.Lambda(double)])


def double(x: Any) -> Any:
    return x * 2


def interleaved(sides: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each side's seconds a sample, one per repeat; the sides' order rotates from repeat to repeat."""
    names = list(sides)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:
            out[name].append(sides[name]())
    return out


def ratio_line(times: dict[str, list[float]], over: str, under: str) -> str:
    ratios = [a / b for a, b in zip(times[over], times[under], strict=True)]
    return f"{over}/{under} median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"


def added_us(times: dict[str, list[float]], side: str, base: str, calls: int = 1) -> float:
    """The median over repeats of what ``side`` adds to ``base``, in µs a call."""
    return statistics.median(a - b for a, b in zip(times[side], times[base], strict=True)) / calls * 1e6


def per_sample(call: Callable[[], object], number: int) -> Callable[[], float]:
    return lambda: timeit.timeit(call, number=number) / number


def transform_calls(number: int, repeats: int) -> None:
    from torchvision import transforms as v1
    from torchvision.transforms import v2

    image = torch.rand(3, 32, 32)
    for name, module in (("v1 Compose", v1), ("v2 Compose", v2)):
        plain, timed = pipeline(module), pipeline(module)
        TransformTimer().install(timed)
        times = interleaved({"timed": per_sample(partial(timed, image), number),
                             "plain": per_sample(partial(plain, image), number)}, repeats)
        calls = len(plain.transforms)
        print(f"  {name}: {_us(times, 'plain')} µs a sample plain, {_us(times, 'timed')} timed: "
              f"+{added_us(times, 'timed', 'plain', calls):.2f} µs a transform call; {ratio_line(times, 'timed', 'plain')}")


def real_pipeline(number: int, repeats: int) -> None:
    """An ImageNet-style v1 training pipeline on a 256x256 PIL image (a millisecond or so a sample): what the
    timing weighs where real pipelines spend their time."""
    from torchvision import transforms as v1

    def make() -> Any:
        return v1.Compose([v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), v1.ToTensor(),
                           v1.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 256, 3), dtype=np.uint8))
    plain, timed = make(), make()
    TransformTimer().install(timed)
    times = interleaved({"timed": per_sample(partial(timed, image), number),
                         "plain": per_sample(partial(plain, image), number)}, repeats)
    print(f"  {_us(times, 'plain')} µs a sample plain, {_us(times, 'timed')} timed: "
          f"+{added_us(times, 'timed', 'plain', len(plain.transforms)):.2f} µs a transform call; "
          f"{ratio_line(times, 'timed', 'plain')}")


def decode_calls(folder: Path, number: int, repeats: int) -> None:
    png, npy = folder / "small.png", folder / "small.npy"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(png)
    np.save(npy, rng.random((32, 32), dtype=np.float32))
    cases = {"PIL.Image.open(png).convert('L')": (lambda: Image.open(png).convert("L"), 2),  # open, convert timed
             "numpy.load(npy)": (lambda: np.load(npy), 1)}
    for name, (call, calls) in cases.items():
        def side(installed: bool, fetch: bool, call: Callable[[], object] = call) -> float:
            patches = Patches()
            if installed:
                decode_hooks.install(patches)
            if fetch:
                decode_hooks.begin()
            try:
                return timeit.timeit(call, number=number) / number
            finally:
                decode_hooks.end()
                decode_hooks.take()
                patches.undo()
        times = interleaved({"not patched": lambda: side(False, False), "outside a fetch": lambda: side(True, False),
                             "in a fetch": lambda: side(True, True)}, repeats)
        print(f"  {name}: {_us(times, 'not patched')} µs a sample not patched; outside a fetch "
              f"+{added_us(times, 'outside a fetch', 'not patched'):.2f} µs; in a timed fetch "
              f"+{added_us(times, 'in a fetch', 'not patched'):.2f} µs a sample "
              f"({added_us(times, 'in a fetch', 'not patched', calls):.2f} µs a timed call, {calls} a sample); "
              f"{ratio_line(times, 'in a fetch', 'not patched')}")


class Images(Dataset):
    """32×32 images in memory through ``transform``."""

    def __init__(self, n: int, transform: Any) -> None:
        self.images, self.transform = torch.rand(n, 3, 32, 32), transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Any:
        return self.transform(self.images[index]), index % 10


class Untimed(TransformHooks):
    """The hooks' transform and decode timing off: no pipeline timed, no decode call patched."""

    def on_loader(self, loader: Any, number: int, collate: Any) -> None:
        return None


def script_batches(folder: Path, samples: int, passes: int, repeats: int) -> None:
    from torchvision import transforms as v1

    def side(hooked: bool, timing: bool) -> float:
        probe = hooks.Hooks(hooks.EventLog(str(folder / f"events-{time.perf_counter_ns()}.jsonl"))) if hooked else None
        if probe is not None:
            if not timing:
                probe.transforms = Untimed(probe.patches, probe.log, probe.clock, str(id(probe)))
            probe.install()
        try:
            loader = DataLoader(Images(samples, pipeline(v1)), batch_size=32, num_workers=0)
            for _ in loader:  # the first pass: the loader's first iter() sets its timing up, once
                pass
            t0 = time.perf_counter()
            for _ in range(passes):
                for _ in loader:
                    pass
            return (time.perf_counter() - t0) / (passes * samples)
        finally:
            if probe is not None:
                probe.uninstall()

    times = interleaved({"timing on": lambda: side(True, True), "timing off": lambda: side(True, False),
                         "no hooks": lambda: side(False, False)}, repeats)
    on, off = times["timing on"], times["timing off"]
    rates = [b / a for a, b in zip(on, off, strict=True)]  # samples/s on / off
    print(f"  µs a sample: {_us(times, 'no hooks')} without the hooks, {_us(times, 'timing off')} hooked with the "
          f"timing off, {_us(times, 'timing on')} with it on: the timing adds "
          f"{added_us(times, 'timing on', 'timing off'):.2f} µs a sample "
          f"({added_us(times, 'timing on', 'timing off', 4):.2f} a transform call), the hooks without it "
          f"{added_us(times, 'timing off', 'no hooks'):.2f}")
    print(f"  samples/s timing on / off: median {statistics.median(rates):.3f} (min {min(rates):.3f}, "
          f"max {max(rates):.3f})")


def _us(times: dict[str, list[float]], side: str) -> str:
    return f"{statistics.median(times[side]) * 1e6:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=2000, help="calls per repeat (parts 1 and 2)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--samples", type=int, default=1024, help="the DataLoader's dataset (part 3)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over it per repeat (part 3)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{args.repeats} repeats interleaved, medians; 1. transform calls ({args.number} calls a repeat):")
    transform_calls(args.number, args.repeats)
    with tempfile.TemporaryDirectory(prefix="pipeprof-transformcost-") as tmp:
        print(f"2. decode calls ({args.number} calls a repeat):")
        decode_calls(Path(tmp), args.number, args.repeats)
        print(f"3. a script's batches: DataLoader, batch 32, 0 workers, 4-transform v1 Compose, {args.passes} passes "
              f"of {args.samples} samples a repeat:")
        script_batches(Path(tmp), args.samples, args.passes, args.repeats)
    print(f"4. a real pipeline: RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize on a 256x256 "
          f"PIL image ({max(args.number // 10, 1)} calls a repeat):")
    real_pipeline(max(args.number // 10, 1), args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
