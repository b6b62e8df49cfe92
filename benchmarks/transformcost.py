"""What per-transform timing (``measure.transforms``) adds to each transform call, in microseconds, and as a ratio.

A torchvision pipeline of cheap transforms on a small image (the case where
timing costs the most in proportion: RandomHorizontalFlip, CenterCrop,
Normalize, a Lambda), v1 and v2, called plain and timed, their repeats
interleaved (``timeit``; the fastest of each side: the least disturbed by a
shared machine). Prints, per pipeline, µs per sample plain and timed, what
the timing adds per transform call, and timed / plain. Issue 18, item 1: a
cost small enough to stay on by default.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.measure.transforms import TransformTimer  # noqa: E402


def pipeline(t):  # type: ignore[no-untyped-def]
    return t.Compose([t.RandomHorizontalFlip(p=0.5), t.CenterCrop(24), t.Normalize(mean=[0.5] * 3, std=[0.25] * 3),
                      t.Lambda(lambda x: x * 2)])


def measure(name: str, plain, timed, image: torch.Tensor, number: int, repeats: int) -> None:  # type: ignore[no-untyped-def]
    sides: dict[str, list[float]] = {"plain": [], "timed": []}
    for _ in range(repeats):
        for side, call in (("plain", plain), ("timed", timed)):
            sides[side].append(timeit.timeit(lambda call=call: call(image), number=number) / number)
    plain_s, timed_s = min(sides["plain"]), min(sides["timed"])
    calls = len(plain.transforms)
    row = {"plain_us": plain_s * 1e6, "timed_us": timed_s * 1e6, "per_call_us": (timed_s - plain_s) / calls * 1e6,
           "ratio": timed_s / plain_s}
    print(f"{name}: {row['plain_us']:.1f} µs a sample plain, {row['timed_us']:.1f} timed: "
          f"+{row['per_call_us']:.2f} µs a transform call, timed/plain {row['ratio']:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=2000, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from torchvision import transforms as v1
    from torchvision.transforms import v2

    image = torch.rand(3, 32, 32)
    for name, module in (("torchvision.transforms (v1)", v1), ("torchvision.transforms.v2", v2)):
        plain, timed = pipeline(module), pipeline(module)
        TransformTimer().install(timed)
        measure(name, plain, timed, image, args.number, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
