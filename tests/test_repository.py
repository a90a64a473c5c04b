"""The repository keeps its promises: README quickstart == CI command, public API pinned."""

import re
from pathlib import Path

import titans_atlas as ta
import titans_atlas.ops as ops

ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_readme_has_two_quickstart_commands_and_ci_runs_the_test_one():
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    assert "titans train" in commands[0]
    assert "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci, "the CI script must run the README test command verbatim"
    # Users keep the torch they have: the README pins none; CI gets its CPU build first.
    assert not any("torch" in command.split("&&")[0] for command in commands), commands
    first_torch = next(i for i, line in enumerate(ci) if line.startswith("pip install torch"))
    assert first_torch < ci.index(commands[1])
    assert {"ruff check .", "ruff format --check ."} <= set(ci), "CI lints and checks formatting"


def test_readme_example_runs(tmp_path):
    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python", 1)[1].split("```", 1)[0]
    exec(compile(code.replace("/tmp/ckpt", str(tmp_path / "ckpt")), "README.md", "exec"), {})


def test_public_api_is_pinned():
    assert sorted(ta.__all__) == sorted(
        [
            "SIZE_PRESETS",
            "CheckpointError",
            "GatedMLPMemory",
            "LanguageModel",
            "LinearMemory",
            "MLPMemory",
            "MemoryConfig",
            "MemoryState",
            "ModelConfig",
            "ModelState",
            "NeuralMemory",
            "create_model",
            "list_models",
            "load_model",
            "memory_scan",
            "model_config",
        ]
    )
    for name in ("memory_scan", "LinearMemory", "MLPMemory", "GatedMLPMemory"):
        assert name in ops.__all__
    assert all(hasattr(ta, name) for name in ta.__all__)


def test_registered_models_are_the_spec_list():
    required = {
        "mac",
        "mag",
        "mal",
        "lmm",
        "atlas",
        "atlas-mag",
        "atlas-mal",
        "omeganet",
        "atlas++",
        "swa",
        "transformer",
    }
    assert required <= set(ta.list_models())


def test_no_todo_without_an_issue():
    for path in Path(ta.__file__).resolve().parent.rglob("*.py"):
        for line in path.read_text().splitlines():
            if "TODO" in line:
                assert re.search(r"TODO\(#\d+\)", line), f"{path}: {line.strip()}"


def test_readme_lists_the_models_in_the_order_list_models_returns():
    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = re.search(r"`ta\.list_models\(\)` gives `([^`]*)`", readme)
    assert listed, "README must say what ta.list_models() gives"
    assert [name.strip() for name in listed.group(1).split(",")] == ta.list_models()
