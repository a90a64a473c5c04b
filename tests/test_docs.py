"""Docs that cannot drift: the symbol table of the ops' README is docs/memory.md's, and no
document names a repository file that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [
        *ROOT.glob("*.md"),
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "src").rglob("*.md"),
        *(ROOT / "research").rglob("*.md"),
        *(ROOT / "benchmarks").rglob("*.md"),
    ]
)
# a path in prose or code spans: starts at a top-level folder of this repository
TOP = ("src", "docs", "tests", "benchmarks", "scripts", "research", "spec", "experiments")
IN_TEXT = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PACKAGE = re.compile(r"(?<![\w./-])((?:ops|layers|models|tasks|io|train|eval|cli|mlx)/[\w/]*\.py)")
SRC = ROOT / "src" / "titans_atlas"


def symbol_table(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| symbol | code name"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def test_the_ops_symbol_table_is_the_memory_notes_table():
    ours, theirs = symbol_table(SRC / "ops" / "README.md"), symbol_table(ROOT / "docs/memory.md")
    assert ours == theirs, "copy docs/memory.md's symbol table into src/titans_atlas/ops/README.md"


IGNORED = {"benchmarks/results"}  # written by the benchmarks, git-ignored


def _exists(reference: str, doc: Path) -> bool:
    reference = reference.rstrip("/.")
    if reference in IGNORED:
        return True
    if any(ch in reference for ch in "*{}<>") or "step_N" in reference:
        return True  # a pattern or placeholder, not a file
    return (ROOT / reference).exists() or (doc.parent / reference).exists()


def references(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    found = [m for m in IN_TEXT.findall(text)]
    found += [m for m in LINK.findall(text) if not re.match(r"[a-z]+:", m)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_document_names_only_files_that_exist(doc):
    missing = sorted({r for r in references(doc) if not _exists(r, doc)})
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_document_names_only_package_modules_that_exist(doc):
    text = doc.read_text(encoding="utf-8")
    missing = sorted(
        {p for p in PACKAGE.findall(text) if not (SRC / p).exists() and not (ROOT / p).exists()}
    )
    assert not missing, f"{doc.relative_to(ROOT)} names modules that do not exist: {missing}"


def test_no_document_points_into_a_spec_folder():
    assert not (ROOT / "spec").exists()
    for doc in DOCS:
        assert "spec/" not in re.sub(r"tokenizer_spec\S*", "", doc.read_text(encoding="utf-8"))
