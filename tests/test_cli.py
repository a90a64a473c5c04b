"""The ``titans`` command: runs as a console script and as ``python -m titans_atlas``."""

import subprocess
import sys

from titans_atlas.cli import main


def test_no_subcommand_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: titans" in capsys.readouterr().out


def test_python_dash_m_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "titans_atlas", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "usage: titans" in out.stdout
