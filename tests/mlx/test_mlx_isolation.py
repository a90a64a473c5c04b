"""The MLX backend is an extra: ``import titans_atlas`` (and its torch modules) never imports
mlx, so the core install works without it. Runs with or without mlx installed."""

import subprocess
import sys
from pathlib import Path

import titans_atlas

# The directory titans_atlas was imported from: src/ or site-packages of an installed wheel.
SRC = Path(titans_atlas.__file__).resolve().parents[1]


def test_core_import_does_not_import_mlx():
    code = (
        "import sys; import titans_atlas, titans_atlas.generation, titans_atlas.io, "
        "titans_atlas.cli; "
        "assert not any(m == 'mlx' or m.startswith(('mlx.', 'titans_atlas.mlx')) "
        "for m in sys.modules), sorted(m for m in sys.modules if 'mlx' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=SRC)
