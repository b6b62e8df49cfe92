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
'''


def tiny_file(folder, *args, **kwargs):
    """``tiny_toml(*args, **kwargs)`` written to ``folder/tiny.toml``; its path."""
    path = folder / "tiny.toml"
    path.write_text(tiny_toml(*args, **kwargs))
    return path
