"""Bad input at every `titans` entry point, one table per subcommand (issue 37).

Each row: the arguments (``{name}`` stands for a file of the world in tests/cli_world.py), the
exception class behind the message (``ArgumentError``: argparse's own usage error; ``None``:
a check that raises nothing), words the message must hold (the argument or file it names),
and -- for every row -- nothing written or changed anywhere in the world, the finished run
included, byte for byte. A last test draws refused commands against the run at random and
checks the same.
"""

from __future__ import annotations

import random
from argparse import ArgumentError

import pytest
import torch

from cli_world import build_world, run_titans, tree
from titans_atlas.io import CheckpointError

CE, VE, AE = CheckpointError, ValueError, ArgumentError
NO_CUDA, HF, DIST = "no CUDA", "transformers", "torch.distributed"  # what a row may need

TRAIN = [  # (id, arguments, class of the error, words of its message)
    ("into-a-run", "train --preset debug --out {run}", VE, "--force"),
    ("resume-and-force", "train --out {run} --resume --force", VE, "exclude each other"),
    ("out-is-a-file", "train --preset debug --out {afile}", VE, "is a file"),
    ("out-empty", "train --preset debug --set train.out_dir= --force", VE, "train.out_dir"),
    ("out-under-a-file", "train --out {afile}/run", VE, "not a directory"),
    ("steps-3.5-in-toml", "train --config {steps.toml} --out {new}", VE, "train.steps takes a int"),
    ("lr-nan-in-json", "train --config {nan.json} --out {new}", VE, "optim.lr must be a finite"),
    ("threads-negative", "train --out {new} --set train.threads=-1", VE, "train.threads"),
    ("lr-infinity", "train --out {new} --set optim.lr=Infinity", VE, "optim.lr"),
    ("steps-zero", "train --out {new} --steps 0", AE, "--steps"),
    ("no-cuda", "train --out {new} --set train.device=cuda", VE, "train.device"),
    ("unknown-device", "train --out {new} --set train.device=gpu", VE, "train.device"),
    ("interrupted-shards", "train --data {partial} --out {new}", VE, "interrupted titans prepare"),
    ("binary-data", "train --preset debug --data {binary} --out {new}", VE, "b.dat"),
    ("escaping-pointer", "train --out {hostile} --resume", CE, "latest.json"),
    ("another-model", "train --preset debug --out {run} --resume --set model.dim=48", CE, "model"),
    ("config-missing", "train --config {empty}/none.toml --out {new}", VE, "none.toml"),
    ("preset-unknown", "train --preset debgu --out {new}", VE, "did you mean"),
    ("typo", "train --out {new} --set train.stpes=3", VE, "steps"),
    ("config-too-deep", "train --config {deep.json} --out {new}", VE, "deep.json"),
    ("shards-without-spec", "train --data {nospec} --out {new}", VE, "tokenizer_spec.json"),
]

PREPARE = [
    ("into-shards", "prepare {text} --out {shards}", VE, "already holds shards"),
    ("into-partial", "prepare {text} --out {partial}", VE, "without meta.json"),
    ("out-is-a-file", "prepare {text} --out {afile}", VE, "is a file"),
    ("shard-tokens-0", "prepare {text} --out {new} --shard-tokens 0", AE, "--shard-tokens"),
    ("latin-1", "prepare {latin1} --out {new}", VE, "latin1"),
    ("binary-in-folder", "prepare {binary} --out {new}", VE, "b.dat"),
    ("missing-source", "prepare {empty}/none.txt --out {new}", VE, "none.txt"),
    ("missing-source-named", "prepare {empty}/none.txt --out {new}", VE, "source '"),
    ("bad-jsonl", "prepare {bad.jsonl} --out {new}", VE, "bad.jsonl:2"),
    ("tokenizer-unknown", "prepare {text} --out {new} --tokenizer nope", VE, "nope"),
    ("tokenizer-file-bad", "prepare {text} --out {new} --tokenizer hf:{tok.json}", VE, "tok.json"),
]

GEN = "generate --checkpoint {model} --prompt x "
GENERATE = [
    ("no-checkpoint", "generate --checkpoint {empty} --prompt x", CE, "neither a run"),
    ("escaping-pointer", "generate --checkpoint {hostile} --prompt x", CE, "latest.json"),
    ("max-new-tokens-negative", GEN + "--max-new-tokens -5", AE, "--max-new-tokens"),
    ("top-k-0", GEN + "--top-k 0", AE, "--top-k"),
    ("temperature-nan", GEN + "--temperature nan", VE, "temperature"),
    ("prompt-file-latin-1", "generate --checkpoint {model} --prompt-file {latin1}", VE, "latin1"),
    ("save-state-a-folder", GEN + "--save-state {adir}", VE, "--save-state"),
    ("save-state-under-a-file", GEN + "--save-state {afile}/s", VE, "--save-state"),
    ("no-cuda", GEN + "--device cuda", VE, "--device"),
    ("meta-device", GEN + "--device meta", VE, "--device"),
    ("seed-past-64-bits", GEN + "--seed 18446744073709551616", AE, "--seed"),
    ("no-tokenizer-spec", "generate --checkpoint {model64} --prompt x", VE, "tokenizer_spec.json"),
    ("state-not-safetensors", GEN + "--load-state {text}", VE, "text.txt"),
    ("state-names-main", GEN + "--load-state {state}", VE, "stream-state classes"),
    ("no-prompt", "generate --checkpoint {model}", VE, "--prompt"),
    ("interactive-and-prompt", GEN + "--interactive", VE, "stdin"),
    (
        "prompt-file-missing",
        "generate --checkpoint {model} --prompt-file {empty}/p",
        VE,
        "--prompt",
    ),
    ("spec-more-ids", "generate --checkpoint {model_ids} --prompt 1", VE, "999 ids"),
    (
        "spec-file-gone",
        "generate --checkpoint {model_hf} --prompt x",
        VE,
        "tokenizer.json is missing",
    ),
]

EVAL = "eval --checkpoint {model} --out {new} "
EVALUATE = [
    ("length-1e8", EVAL + "--task passkey --lengths 100000000", VE, "16777216"),
    ("kv-pairs-0", EVAL + "--task mqar --kv-pairs 0", AE, "--kv-pairs"),
    ("samples-0", EVAL + "--task mqar --samples 0", AE, "--samples"),
    ("threads-negative", EVAL + "--task mqar --threads -1", AE, "--threads"),
    ("length-not-a-number", EVAL + "--task mqar --lengths 1Q", AE, "--lengths"),
    ("depth-2", EVAL + "--task passkey --depths 2", VE, "depths"),
    ("out-is-a-file", "eval --checkpoint {model} --task mqar --out {afile}", VE, "--out"),
    ("no-cuda", EVAL + "--task mqar --device cuda", VE, "--device"),
    ("haystack-missing", EVAL + "--task sniah-pk --haystack-dir {empty}/no", VE, "--haystack-dir"),
    ("escaping-pointer", "eval --checkpoint {hostile} --out {new} --task mqar", CE, "latest.json"),
    ("text-latin-1", EVAL + "--task perplexity --text {latin1}", VE, "latin1"),
    ("no-tokenizer-spec", "eval --checkpoint {model64} --out {new} --task mqar", VE, "tokenizer"),
]

EXPORT = [
    ("destination-a-file", "export --format hf {model} {afile}", VE, "is a file"),
    ("destination-not-empty", "export --format hf {model} {shards}", None, "not empty"),
    ("source-missing", "export --format hf {empty}/m {new}", CE, "checkpoint is missing"),
    ("no-tokenizer-spec", "export --format hf {model64} {new}", VE, "tokenizer_spec.json"),
    ("not-an-hf-folder", "export --format titans {model64}/none {new}", CE, "not a Hugging Face"),
    ("ours-as-hf", "export --format titans {model} {new}", CE, "our model directory"),
]

CONSOLIDATE = [
    ("not-sharded", "consolidate {run}", CE, "not a sharded checkpoint"),
    ("not-a-checkpoint", "consolidate {empty}", CE, "neither a run"),
    ("escaping-pointer", "consolidate {hostile}", CE, "latest.json"),
    ("out-is-a-file", "consolidate {sharded} --out {afile}", VE, "--out"),
]

# Rows that need something of the machine: no CUDA, transformers, torch.distributed.
NEEDS = {
    "train:no-cuda": NO_CUDA, "generate:no-cuda": NO_CUDA, "eval:no-cuda": NO_CUDA,
    "export:source-missing": HF, "export:no-tokenizer-spec": HF, "export:not-an-hf-folder": HF,
    "export:ours-as-hf": HF, "prepare:tokenizer-file-bad": HF,
    "consolidate:out-is-a-file": DIST,
}  # fmt: skip

TABLES = {
    "train": TRAIN, "prepare": PREPARE, "generate": GENERATE, "eval": EVALUATE,
    "export": EXPORT, "consolidate": CONSOLIDATE,
}  # fmt: skip
ROWS = [pytest.param(f"{name}:{row[0]}", *row[1:], id=f"{name}:{row[0]}")
        for name, rows in TABLES.items() for row in rows]  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    return root, build_world(root)


def argv_of(template: str, paths: dict) -> list[str]:
    for name, path in paths.items():
        template = template.replace(f"{{{name}}}", str(path))
    return template.split()


def _skip_unless_possible(needs: str | None) -> None:
    if needs == NO_CUDA and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    if needs == HF:
        pytest.importorskip("transformers")
    if needs == DIST and not torch.distributed.is_available():
        pytest.skip("torch built without torch.distributed")


@pytest.mark.parametrize("row, template, expected, fragment", ROWS)
def test_a_refused_command_says_why_and_changes_nothing(
    world, row, template, expected, fragment, monkeypatch
):
    root, paths = world
    _skip_unless_possible(NEEDS.get(row))
    before = tree(root)
    outcome = run_titans(argv_of(template, paths), monkeypatch)
    assert outcome.code != 0, outcome.err
    assert fragment in outcome.err, outcome.err
    assert "Traceback" not in outcome.err
    if expected is not None:
        assert any(issubclass(c, expected) for c in outcome.classes), outcome.classes
    assert tree(root) == before, "a refused command wrote or changed a file"


# Refusals that aim at the finished run (each alone is enough to refuse the command), and
# harmless arguments that may ride along: drawn together, the run must stay as it was.
AT_RUN = {
    "train --preset debug --out {run}": ["", "--resume --force", "--resume --steps 0",
        "--resume --set optim.lr=NaN", "--resume --set train.threads=-2",
        "--resume --config {steps.toml}", "--resume --set train.device=gpu",
        "--resume --data {partial}"],
    "generate --checkpoint {run} --prompt x": ["--top-k 0", "--max-new-tokens -1",
        "--temperature -1", "--save-state {adir}", "--load-state {state}",
        "--prompt-file {latin1}", "--seed -3"],
    "eval --checkpoint {run} --task mqar --out {new}": ["--samples 0", "--kv-pairs 0",
        "--lengths 99999999", "--out {afile}", "--depths 1.5 --task passkey", "--seed -1"],
    "consolidate {run}": ["", "--out {afile}"],
    "prepare {latin1} --out {run}": ["", "--shard-tokens 0"],
}  # fmt: skip
HARMLESS = {  # valid arguments of each command
    "train": ["--set train.log_every=1", "--set train.seed=4"],
    "generate": ["--seed 3", "--max-new-tokens 4", "--greedy"],
    "eval": ["--seed 3", "--samples 2", "--piece-size 64"],
    "consolidate": [],
    "prepare": ["--text-field body"],
}


def test_random_refused_commands_leave_the_run_byte_for_byte(world, monkeypatch):
    _, paths = world
    before, draw, drawn = tree(paths["run"]), random.Random(37), set()
    for _ in range(30):
        command = draw.choice(sorted(AT_RUN))
        harmless = HARMLESS[command.split()[0]]
        parts = [draw.choice(AT_RUN[command]), *draw.sample(harmless, min(1, len(harmless)))]
        draw.shuffle(parts)
        argv = argv_of(" ".join([command, *parts]), paths)
        outcome = run_titans(argv, monkeypatch)
        assert outcome.code != 0, f"{argv} was not refused:\n{outcome.err}"
        assert "Traceback" not in outcome.err and "unrecognized" not in outcome.err
        assert tree(paths["run"]) == before, f"{argv} changed the run"
        drawn.add(command)
    assert drawn == set(AT_RUN) and not paths["new"].exists()
