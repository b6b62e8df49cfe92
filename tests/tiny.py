"""The tiny scenario end-to-end tests train: a few seconds of real training on 2 cores.

Imported by the test modules (pytest puts this folder on sys.path).
"""


def tiny_toml(name: str = "tiny", description: str = "a tiny run", *, storage: str = "ram", samples: int = 2000,
              steps: int = 30, workers: int = 0) -> str:
    """A scenario file's text: a 32-unit MLP on CPU, batches of 50, 5 warm-up steps."""
    return f'''
name = "{name}"
description = "{description}"
[data]
storage = "{storage}"
samples = {samples}
[loader]
batch_size = 50
num_workers = {workers}
[model]
hidden = [32]
[train]
steps = {steps}
warmup_steps = 5
device = "cpu"
[profile]
what_ifs = false  # the post-run probes (up to 3 s a run) are tested in test_what_if
'''


def tiny_file(folder, *args, **kwargs):
    """``tiny_toml(*args, **kwargs)`` written to ``folder/tiny.toml``; its path."""
    path = folder / "tiny.toml"
    path.write_text(tiny_toml(*args, **kwargs))
    return path


def script_stepping(proc) -> bool:
    """True once the script under ``pipeprof profile`` (a process under ``proc``) has recorded an optimizer step:
    its event file, named in its environment, holds an ``O`` event."""
    from pathlib import Path

    import psutil
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            path = child.environ().get("PIPEPROF_EVENTS")
            if path and Path(path).exists() and '"O"' in Path(path).read_text():
                return True
    except (psutil.Error, OSError):
        pass
    return False
