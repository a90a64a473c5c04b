"""Stream-state files name their classes; only the registered stream-state classes are
rebuilt, and nothing is imported by a name read from a file (issue 37)."""

import json
import sys

import pytest
import torch
from safetensors.torch import save_file

from titans_atlas import create_model
from titans_atlas.io.state import load_state, save_state, state_classes


def _write(path, structure) -> None:
    meta = {"format": "titans-atlas-state", "structure": json.dumps(structure)}
    save_file({"t0": torch.zeros(1)}, str(path), meta)


@pytest.mark.parametrize(
    "name",
    [
        "titans_atlas.__main__:ModelState",  # importing it used to run the CLI
        "titans_atlas.demo:ModelState",
        "titans_atlas.models.state:check_state",
        "os:system",
    ],
)
def test_an_unregistered_class_is_refused_and_imports_nothing(tmp_path, name, monkeypatch):
    module = name.partition(":")[0]
    if module.startswith("titans_atlas."):  # so that an import would show; put back after:
        monkeypatch.delitem(sys.modules, module, raising=False)  # a later import of it would
        # make a second module, whose classes compiled code's guards tell from the first
    before = _ours()
    _write(tmp_path / "s.safetensors", {"dataclass": name, "fields": {}})
    with pytest.raises(ValueError, match="stream-state classes") as caught:
        load_state(tmp_path / "s.safetensors")
    assert str(tmp_path / "s.safetensors") in str(caught.value)
    assert _ours() == before


def _ours() -> set[str]:
    return {m for m in sys.modules if m.startswith("titans_atlas")}


@pytest.mark.parametrize(
    "structure",
    [
        {"dataclass": "titans_atlas.ops.state:MemoryState", "fields": {"nope": {"value": 1}}},
        {"dataclass": "titans_atlas.ops.state:MemoryState", "fields": [1]},
        {"tensor": ["t0"]},
        {"dict": [1, 2]},
        {"value": {"a": 1}},
        {"tensor": "t0", "value": 1},
    ],
)
def test_a_malformed_structure_is_a_value_error(tmp_path, structure):
    _write(tmp_path / "s.safetensors", structure)
    with pytest.raises(ValueError, match=r"s\.safetensors"):
        load_state(tmp_path / "s.safetensors")


def test_every_model_state_round_trips_through_the_registry(tmp_path):
    for name in ("mac", "mag", "atlas", "transformer"):
        model = create_model(name, preset="debug")
        _, state = model(torch.zeros(1, 40, dtype=torch.long))
        save_state(state, tmp_path / f"{name}.safetensors")
        loaded, _ = load_state(tmp_path / f"{name}.safetensors")
        assert type(loaded) is type(state) and loaded.position == state.position


def test_a_file_naming_model_state_by_its_old_module_still_loads(tmp_path):
    model = create_model("lmm", preset="debug")
    _, state = model(torch.zeros(1, 8, dtype=torch.long))
    save_state(state, tmp_path / "s.safetensors")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "s.safetensors"), "pt") as handle:
        meta, tensors = handle.metadata(), {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    meta["structure"] = meta["structure"].replace(
        "titans_atlas.models.state:ModelState", "titans_atlas.models.backbone:ModelState"
    )
    assert "models.backbone" in meta["structure"]
    save_file(tensors, str(tmp_path / "old.safetensors"), meta)
    loaded, _ = load_state(tmp_path / "old.safetensors")
    assert loaded.position == state.position
    assert "titans_atlas.models.backbone:ModelState" in state_classes()


def test_importing_the_main_module_does_not_run_the_command():
    import subprocess

    code = "import sys; sys.argv = ['x', 'train']; import titans_atlas.__main__; print('alive')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "alive", out.stderr[-500:]
