"""Command-line flags that are sugar for a scenario key (``--cprofile 50`` = ``--set profile.cprofile_steps=50``).

Such a flag appends ``SECTION.KEY=VALUE`` to the same ``overrides`` list that
``--set`` fills, in command-line order, so the value goes through the
scenario's own validation, is recorded with the other overrides in run.json,
and a later ``--set`` of the same key wins over an earlier flag (and the
other way round).
"""

from __future__ import annotations

import argparse
from typing import Any


class SetKey(argparse.Action):
    """``nargs="?"`` flag: the given value, or ``const`` when given bare, becomes ``--set KEY=VALUE``."""

    def __init__(self, option_strings: list[str], dest: str, *, key: str, **kwargs: Any) -> None:
        self.key = key
        super().__init__(option_strings, dest, nargs="?", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        overrides = list(getattr(namespace, "overrides", None) or [])  # never the parser's shared default list
        overrides.append(f"{self.key}={values}")
        namespace.overrides = overrides


def add_code_profile_flags(p: argparse.ArgumentParser) -> None:
    """``--cprofile [STEPS]`` and ``--pyspy [HZ]`` (a parser that also has ``--set``, dest ``overrides``)."""
    p.add_argument("--cprofile", action=SetKey, key="profile.cprofile_steps", const=50, type=int, metavar="STEPS",
                   help="cProfile STEPS counted steps after warm-up (default 50) in the training process, and the "
                        "DataLoader workers for their whole life; = --set profile.cprofile_steps=STEPS")
    p.add_argument("--pyspy", action=SetKey, key="profile.pyspy_hz", const=20, type=int, metavar="HZ",
                   help="sample the training process and its workers with py-spy at HZ (default 20, non-blocking) "
                        "into pyspy.speedscope.json; = --set profile.pyspy_hz=HZ")
