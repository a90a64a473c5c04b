"""Research stays apart from the product: its scripts use the public API (no patching of
library internals, no private names) and its tests are not part of the default run."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESEARCH = sorted((ROOT / "research").rglob("*.py"))


def test_the_default_run_collects_tests_only():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.findall(r"^testpaths = (.*)$", pyproject, flags=re.M) == ['["tests"]']
    assert (ROOT / "research" / "tests").is_dir()


def test_research_uses_no_mock_and_no_private_library_name():
    found = []
    for path in RESEARCH:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("unittest"):
                found.append(f"{path.name}: imports {node.module}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("titans_atlas"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                parts = [p for p in (node.module or "").split(".") if p.startswith("_")]
                if private or parts:
                    found.append(f"{path.name}: {node.module} {private}")
            stores = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            if stores and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{path.name}:{node.lineno}: assigns .{node.attr}")
    assert not found, found
