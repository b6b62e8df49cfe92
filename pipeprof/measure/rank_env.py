"""Which rank of a multi-process job the calling process is, read from the environment its launcher gave it.

Standard library only: this is imported inside the user's rank processes, before their training starts.

- torchrun / ``python -m torch.distributed.run`` sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
  ``GROUP_RANK`` (the node's rank), ``TORCHELASTIC_RUN_ID`` (``--rdzv-id``; ``"none"`` unless given,
  so not an id then), ``MASTER_ADDR`` and ``MASTER_PORT``.
- SLURM (``srun``) sets ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``, ``SLURM_NODEID``,
  ``SLURM_JOB_ID`` and ``SLURMD_NODENAME`` for each task.
- Neither: a single process (every key None but the node).

torchrun's variables win over SLURM's when both are set (``srun torchrun ...``): the ranks are torchrun's
processes. A value that is not a number (``RANK=abc``) or out of range (a negative rank, a world size of 0)
is left out, never raised: a profiler must not stop a job over its launcher's environment. The
torch.distributed view (``dist.get_rank()`` once the process group exists) is the hooks' to add.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

# torchrun's --rdzv-id when the user gave none: shared by every job, so it identifies none.
_NO_RUN_ID = "none"
IDENTITY_KEYS = ("rank", "local_rank", "world_size", "node", "node_rank", "job_id", "launcher")


def _count(environ: Mapping[str, str], *names: str, least: int = 0) -> int | None:
    """The first of ``names`` set to a whole number >= ``least``; None if none is."""
    for name in names:
        text = environ.get(name, "").strip()
        try:
            value = int(text)
        except ValueError:
            continue
        if value >= least:
            return value
    return None


def _text(environ: Mapping[str, str], name: str) -> str | None:
    text = environ.get(name, "").strip()
    return text or None


def launcher(environ: Mapping[str, str] = os.environ) -> str | None:
    """``"torchrun"`` (TORCHELASTIC_RUN_ID set), ``"slurm"`` (SLURM_PROCID set), or None."""
    if "TORCHELASTIC_RUN_ID" in environ:
        return "torchrun"
    if "SLURM_PROCID" in environ:
        return "slurm"
    return None


def rank_identity(environ: Mapping[str, str] = os.environ,
                  hostname: Callable[[], str] = socket.gethostname) -> dict[str, Any]:
    """The calling process's place in its job: ``rank``, ``local_rank``, ``world_size``, ``node`` (host
    name), ``node_rank``, ``job_id`` and ``launcher``; each None where the environment does not say
    (``node`` is always the host name). ``hostname`` is injected for tests."""
    how = launcher(environ)
    if how == "slurm":
        rank = _count(environ, "SLURM_PROCID")
        local_rank = _count(environ, "SLURM_LOCALID")
        world_size = _count(environ, "SLURM_NTASKS", least=1)
        node_rank = _count(environ, "SLURM_NODEID")
    else:  # torchrun, or a process given RANK / WORLD_SIZE by hand or by its parent (mp.spawn users do)
        rank = _count(environ, "RANK")
        local_rank = _count(environ, "LOCAL_RANK")
        world_size = _count(environ, "WORLD_SIZE", least=1)
        node_rank = _count(environ, "GROUP_RANK", "NODE_RANK")
    if rank is not None and world_size is not None and rank >= world_size:
        rank = None  # RANK=4 of WORLD_SIZE=4: one of them is wrong, and nothing says which
    node = (_text(environ, "SLURMD_NODENAME") if how == "slurm" else None) or hostname() or None
    identity = {"rank": rank, "local_rank": local_rank, "world_size": world_size, "node": node,
                "node_rank": node_rank, "launcher": how}
    identity["job_id"] = _job_id_from(environ, how)
    return identity


def _job_id_from(environ: Mapping[str, str], how: str | None) -> str | None:
    run_id = _text(environ, "TORCHELASTIC_RUN_ID")
    if how == "torchrun" and run_id and run_id != _NO_RUN_ID:
        return run_id
    slurm_job = _text(environ, "SLURM_JOB_ID")
    if slurm_job:
        return slurm_job
    address, port = _text(environ, "MASTER_ADDR"), _text(environ, "MASTER_PORT")
    if address and port:
        return f"{address}:{port}"
    return None


def job_id(identity: Mapping[str, Any] | None) -> str | None:
    """The job id of a rank identity (``rank_identity()``, or a run's ``meta["rank"]``), None if unknown.

    Two ranks with the same id are of the same job; with different ids, of different jobs. None (no
    id) proves nothing either way.
    """
    value = (identity or {}).get("job_id")
    if value is None:
        return None
    text = str(value).strip()
    return text or None
