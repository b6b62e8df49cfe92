"""The data libraries' registry (``pipeprof.adapters``): each library one module, and no library named in code
anywhere else, so that supporting a new one is one module, one fixture and one test."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import pipeprof
from pipeprof import adapters
from pipeprof.adapters import ADAPTERS, Adapter

PACKAGE = Path(pipeprof.__file__).parent
CORE = {"torch"}  # torch's own DataLoader is the hooks' core: its name is everywhere, as it should be
# a string that is a package's name but says no library: ConcatDataset's attribute ``datasets``
NOT_A_LIBRARY = {("script/transform_hooks.py", "datasets")}
# the integrations are each a library's own callback API (pipeprof.integrations.lightning is a Lightning Callback),
# imported only by that library's users: they are where the library is, by nature
EXEMPT = ("adapters", "integrations", "gpu_check")


def _modules() -> list[str]:
    return [m.name for m in pkgutil.iter_modules([str(PACKAGE / "adapters")]) if m.name != "base"]


def test_every_adapter_module_is_registered_once_with_an_adapter_of_its_own():
    registered = {a.name for a in ADAPTERS}
    assert len(registered) == len(ADAPTERS)
    for name in _modules():
        module = importlib.import_module(f"pipeprof.adapters.{name}")
        assert isinstance(module.ADAPTER, Adapter), name
        assert module.ADAPTER in ADAPTERS, f"{name} is not in the registry"
        assert module.ADAPTER.sees, f"{name} does not say what pipeprof sees through it (the docs' table)"


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module's code, docstrings left out (prose may name a library)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def _names_a_library(text: str, packages: set[str]) -> str | None:
    head = text.split(".")[0]
    return head if head in packages else None


def test_no_library_is_named_in_code_outside_its_adapter():
    packages = set(adapters.library_packages()) - CORE
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE)
        if where.parts[0] in EXEMPT:
            continue
        for line, text in _string_constants(path):
            library = _names_a_library(text, packages)
            if library is not None and (where.as_posix(), text) not in NOT_A_LIBRARY:
                found.append(f"{path.relative_to(PACKAGE)}:{line}: {text!r}")
    assert not found, "library names outside pipeprof/adapters:\n" + "\n".join(found)


def test_the_check_above_finds_a_library_named_in_code(tmp_path):
    module = tmp_path / "somewhere.py"
    module.write_text('"""timm is named in prose, which is allowed."""\nLOOK_AHEAD = {"timm.data.loader": ()}\n')
    texts = [text for _, text in _string_constants(module)]
    assert texts == ["timm.data.loader"]
    assert _names_a_library(texts[0], set(adapters.library_packages())) == "timm"


def test_a_framework_is_named_by_the_first_adapter_whose_packages_are_seen():
    pairs = dict(adapters.framework_packages())
    assert pairs["transformers"] == "transformers" and pairs["pytorch_lightning"] == "lightning"
    order = [framework for _, framework in adapters.framework_packages()]
    assert order.index("transformers") < order.index("accelerate")  # the Trainer iterates through accelerate


@pytest.mark.parametrize("framework, built_in, expected", [
    ("transformers", None, "TrainingArguments(dataloader_num_workers=4)"),
    ("lightning", "train_dataloader", "the DataLoader built in train_dataloader(): DataLoader(ds, num_workers=4)"),
    ("lightning", None, None),  # a Lightning script passing its own loaders: written as the DataLoader's
    (None, None, None),
])
def test_a_change_is_written_as_the_library_that_built_the_loader_has_it(framework, built_in, expected):
    assert adapters.write_change(framework, {"loader.num_workers": 4}, built_in,
                                 "DataLoader(ds, num_workers=4)") == expected


def test_a_change_the_trainer_has_no_argument_for_is_written_as_the_dataloader():
    assert adapters.write_change("transformers", {"loader.batch_size": 64}, None, "DataLoader(ds)") is None


def test_registry_lookups_merge_every_adapter():
    assert "StatefulDataLoader" in adapters.own_iter()["torchdata.stateful_dataloader.stateful_dataloader"]
    assert adapters.own_step()["fastai.optimizer"] == ("Optimizer",)
    assert adapters.builder_name("transformers", "get_train_dataloader") == "Trainer train loader"
    assert adapters.builder_name("transformers", "train") is None
    assert adapters.table_reads("datasets.arrow_dataset") is not None and adapters.table_reads("mine") is None
    assert adapters.own_loader(object()) is None


def test_the_docs_table_lists_every_adapter_with_what_it_sees():
    page = (PACKAGE.parent / "docs" / "script.md").read_text(encoding="utf-8")
    for a in ADAPTERS:
        assert f"| {a.name} |" in page and a.sees in page, f"docs/script.md lacks {a.name}'s row"
