"""docs/walkthrough.md and ARCHITECTURE.md stay true to the code: every function they name (`name()`,
`Class.method()`, `module.function()`) is defined in bvr/, every file they name exists, and following one
pretraining run (the walkthrough's section 6) takes at most ten functions."""

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
MAX_PRETRAINING_FUNCTIONS = 10
"""Functions a newcomer reads to follow one pretraining run (the walkthrough's section 6)."""


@cache
def definitions() -> dict[str, frozenset[str]]:
    """Each name bvr/ defines (function, method or class) -> the dotted paths it is defined at
    (``bvr.runner.units.pretrain``, ``bvr.pretraining.module.PretrainingModule.training_step``)."""
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


def test_one_pretraining_run_is_followed_through_ten_functions_at_most():
    named = set(NAMED.findall(section((ROOT / "docs" / "walkthrough.md").read_text(encoding="utf-8"), 6)))
    assert 0 < len(named) <= MAX_PRETRAINING_FUNCTIONS, sorted(named)
    assert unknown(sorted(named)) == []


def test_the_checks_catch_a_name_that_does_not_exist_and_a_long_section():
    assert unknown(["units.pretrain", "Runner.run_unit", "bvr.formatting.pretrain_summary", "pretrain"]) == []
    assert unknown(["_describe_plan", "units.no_such_handler", "Runner.pretrain"]) == [
        "_describe_plan", "units.no_such_handler", "Runner.pretrain"]
    long = "## 6. Pretraining\n" + " ".join(f"`f{i}()`" for i in range(11)) + "\n## 7. Next\n`g()`\n"
    assert len(set(NAMED.findall(section(long, 6)))) == 11 > MAX_PRETRAINING_FUNCTIONS
