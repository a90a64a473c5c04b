"""``benchmarks/regress.py``: its options, its verdict, and a smoke run against HEAD itself."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "regress.py"
spec = importlib.util.spec_from_file_location("regress", SCRIPT)
regress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(regress)


def test_options_and_their_checks():
    args = regress.parse_args(["--base", "7cb7422"])
    assert args.cases == ["titans", "atlas", "train", "decode"]
    assert (args.pairs, args.repeats, args.threads, args.threshold) == (3, 3, 1, 0.05)
    quick = regress.parse_args(["--base", "HEAD", "--cases", "atlas", "--quick", "--pairs", "4"])
    assert (quick.cases, quick.pairs, quick.repeats) == (["atlas"], 1, 1)
    for bad in ([], ["--base", "HEAD", "--cases", "mlp"], ["--base", "HEAD", "--pairs", "0"]):
        with pytest.raises(SystemExit):
            regress.parse_args(bad)


def _round(base_s: float, head_s: float) -> dict:
    side = {"tokens": 512, "other_cpu_s": 0.0, "stand_ins": []}
    base, head = side | {"median_s": base_s, "wall_s": base_s}, side | {"median_s": head_s}
    return {"base": base, "head": head | {"wall_s": 2 * head_s}}


def test_a_slower_head_is_flagged_past_the_threshold_only():
    slower = regress.summarize([_round(1.0, 1.2), _round(1.0, 1.1), _round(1.0, 1.0)], 0.05)
    assert slower["ratio"] == pytest.approx(1 / 1.1) and slower["slower"]
    assert slower["head"]["tokens_per_s"] == pytest.approx(512 / 1.1)
    assert slower["wall_ratio"] == pytest.approx(1 / 2.2)
    assert not regress.summarize([_round(1.0, 1.04)], 0.05)["slower"]
    assert not regress.summarize([_round(1.2, 1.0)], 0.05)["slower"]  # HEAD faster


def test_quick_run_against_head_itself(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    out = tmp_path / "regress.json"
    command = [sys.executable, str(SCRIPT), "--base", "HEAD", "--cases", "atlas", "--quick"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| atlas: memory fwd+bwd, ATLAS geometry |" in done.stdout
    report = json.loads(out.read_text())
    atlas = report["cases"]["atlas"]
    assert report["base_commit"] == report["head"] and len(atlas["ratios"]) == 1
    assert atlas["base"]["median_s"] > 0 and atlas["head"]["median_s"] > 0
    assert atlas["base"]["stand_ins"] == []
