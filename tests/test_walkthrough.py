"""docs/walkthrough.md and ARCHITECTURE.md stay true to the code: every function they name (`name()`,
`Class.method()`, `module.function()`) is defined in bvr/, every file they name exists, and following one
`bvr pretrain` (the walkthrough's section 6) takes at most twelve files, each function it names defined in one
of them."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "walkthrough.md", ROOT / "ARCHITECTURE.md")
NAMED = re.compile(r"`([A-Za-z_][\w.]*)\(\)`")
PATH = re.compile(r"`((?:bvr|tests|experiments|benchmarks)/[\w./-]*)`")
"""A file of the repository (``reports/`` holds what a run writes, not what the code is)."""
MAX_PRETRAINING_FILES = 12
"""Files a newcomer reads to follow one ``bvr pretrain`` from the command line to the optimiser step and the
MLflow record (the walkthrough's section 6)."""
MAX_PRETRAINING_FUNCTIONS = 24
"""Functions named on the way: one reading, not a tour of the package."""


@cache
def definitions() -> dict[str, frozenset[str]]:
    """Each name bvr/ defines (function, method or class) -> the dotted paths it is defined at
    (``bvr.runner.units.pretrain``, ``bvr.pretraining.run.PretrainingModule.training_step``)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "bvr").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found.setdefault(child.name, set()).add(f"{prefix}.{child.name}")
                    visit(child, f"{prefix}.{child.name}")
        visit(ast.parse(path.read_text(encoding="utf-8")), module)
    return {name: frozenset(paths) for name, paths in found.items()}


def unknown(names: list[str]) -> list[str]:
    """The names no definition in bvr/ answers: ``x()`` needs a ``x``; ``a.x()`` a ``x`` inside a class or module
    whose dotted path ends in ``a`` (``units.pretrain``, ``Runner.run_unit``, ``bvr.formatting.pretrain_summary``)."""
    out = []
    for name in names:
        *owner, last = name.split(".")
        paths = definitions().get(last, frozenset())
        if not any(f".{path}".endswith(".".join(["", *owner, last])) for path in paths):
            out.append(name)
    return out


def section(text: str, number: int) -> str:
    """The text of the walkthrough's section ``## NUMBER. ...``, up to the next section."""
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"no section {number}"
    return match.group(0)


def test_every_function_the_documents_name_is_defined_in_bvr():
    for doc in DOCS:
        names = sorted(set(NAMED.findall(doc.read_text(encoding="utf-8"))))
        assert unknown(names) == [], f"{doc.name} names functions bvr/ does not define"
    assert len(NAMED.findall(DOCS[0].read_text(encoding="utf-8"))) > 100  # the walkthrough names its functions


def test_every_file_the_walkthrough_names_exists():
    text = (ROOT / "docs" / "walkthrough.md").read_text(encoding="utf-8")
    placeholder = re.compile(r"\b[A-Z]{3,}\b")  # experiments/NAME.yaml names a kind of file
    missing = sorted(p for p in set(PATH.findall(text))
                     if not placeholder.search(p) and not (ROOT / p.rstrip("/")).exists())
    assert missing == [], f"docs/walkthrough.md names files that do not exist: {missing}"


def defined_in(name: str, files: set[str]) -> bool:
    """Whether ``name`` (``f``, ``Class.method``) is defined in one of ``files`` (``bvr/pretraining/run.py``)."""
    modules = {".".join(Path(f).with_suffix("").parts).removesuffix(".__init__") for f in files}
    return any(path.removesuffix(f".{name}") in modules
               for path in definitions().get(name.split(".")[-1], frozenset()) if path.endswith(f".{name}"))


def test_one_bvr_pretrain_is_followed_through_twelve_files_at_most():
    text = section((ROOT / "docs" / "walkthrough.md").read_text(encoding="utf-8"), 6)
    files = {p for p in PATH.findall(text) if p.startswith("bvr/")}
    named = set(NAMED.findall(text))
    assert 0 < len(files) <= MAX_PRETRAINING_FILES, sorted(files)
    assert 0 < len(named) <= MAX_PRETRAINING_FUNCTIONS, sorted(named)
    assert unknown(sorted(named)) == []
    assert sorted(n for n in named if not defined_in(n, files)) == [], "functions defined in files the section omits"
    for start, end in (("main", "pretrain_cmd"), ("pretrain", "PretrainingModule.training_step"),
                       ("PretrainingModule.training_step", "finish_record")):  # read in call order
        assert text.index(f"`{start}()`") < text.index(f"`{end}()`")


def test_the_checks_catch_a_name_that_does_not_exist_a_long_section_and_a_file_left_out():
    assert unknown(["units.pretrain", "Runner.run_unit", "bvr.formatting.pretrain_summary", "pretrain"]) == []
    assert unknown(["_describe_plan", "units.no_such_handler", "Runner.pretrain"]) == [
        "_describe_plan", "units.no_such_handler", "Runner.pretrain"]
    long = "## 6. Pretraining\n" + " ".join(f"`bvr/f{i}.py`" for i in range(13)) + "\n## 7. Next\n`bvr/g.py`\n"
    assert len(set(PATH.findall(section(long, 6)))) == 13 > MAX_PRETRAINING_FILES
    assert defined_in("PretrainingModule.training_step", {"bvr/pretraining/run.py"})
    assert not defined_in("PretrainingModule.training_step", {"bvr/pretraining/data.py"})
    assert defined_in("main", {"bvr/cli/__init__.py"}) and not defined_in("adamw", {"bvr/cli/__init__.py"})
