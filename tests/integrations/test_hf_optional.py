"""The [hf] extra stays optional: the library and the CLI work without transformers."""

from __future__ import annotations

import subprocess
import sys

from titans_atlas.cli import main

NO_TRANSFORMERS = "import sys; sys.modules['transformers'] = None; "  # import now fails


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_titans_atlas_and_the_cli_parser_do_not_import_transformers():
    out = run_python(
        "import sys, titans_atlas; from titans_atlas.cli import build_parser; build_parser(); "
        "assert 'transformers' not in sys.modules and 'tokenizers' not in sys.modules"
    )
    assert out.returncode == 0, out.stderr


def test_export_without_transformers_says_how_to_install(tmp_path):
    out = run_python(
        NO_TRANSFORMERS + "from titans_atlas.cli import main; "
        f"sys.exit(main(['export', '--format', 'hf', {str(tmp_path)!r}, {str(tmp_path / 'hf')!r}]))"
    )
    assert out.returncode == 1
    assert 'pip install "titans-atlas[hf]"' in out.stderr


def test_export_refuses_a_destination_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "notes.txt").write_text("keep me")
    assert main(["export", "--format", "hf", str(tmp_path), str(tmp_path / "dst")]) == 1
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "dst" / "notes.txt").read_text() == "keep me"
