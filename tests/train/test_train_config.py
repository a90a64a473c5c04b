"""Run settings: preset -> file -> overrides, each checked against the dataclass fields."""

import json
import re

import pytest

from titans_atlas.train import RUN_PRESETS, RunConfig, build_config
from titans_atlas.train.config import config_differences, resume_differences


def test_every_preset_builds_its_model():
    for name in RUN_PRESETS:
        config = build_config(name)
        assert config.model.build().name == config.model.name


def test_overrides_are_typed_and_reach_the_model():
    config = build_config(
        "debug", overrides=["train.steps=7", "optim.lr=1e-3", "model.dim=48", "model.chunk_size=8"]
    )
    assert config.train.steps == 7 and config.optim.lr == 1e-3
    model = config.model.build()
    assert model.dim == 48 and model.memory.chunk_size == 8


@pytest.mark.parametrize(
    "override, named",
    [
        ("train.stpes=3", "steps"),
        ("optim.learning_rate=1", "lr"),
        ("trian.steps=3", "train"),
        ("model.chunksize=8", "chunk_size"),
    ],
)
def test_a_typo_names_the_field_and_its_neighbours(override, named):
    with pytest.raises(ValueError, match=named):
        build_config("debug", overrides=[override])


def test_one_task_argument_can_be_set_keeping_the_others():
    config = build_config("recall", overrides=["data.task_args.layout=interleaved",
                                               "data.task_args.num_pairs=3"])  # fmt: skip
    assert config.data.task_args == {"vocab_size": 32, "num_pairs": 3, "layout": "interleaved"}
    whole = build_config("recall", overrides=['data.task_args={"num_pairs": 2}'])
    assert whole.data.task_args == {"num_pairs": 2}  # the whole dict replaces


def test_task_arguments_belong_to_a_task_source(tmp_path):
    # the recall preset with --data FILE: the preset's task arguments do not follow the source
    text = build_config("recall", overrides=["data.source=builtin:shakespeare"])
    assert text.data.task_args == {}
    same = build_config("recall", overrides=["data.source=task:kv_multi"])
    assert same.data.task_args == {"vocab_size": 32, "num_pairs": 4}  # the source unchanged
    # the user's own arguments are kept whatever their order relative to the source
    for order in (["data.source=task:mqar", "data.task_args.num_pairs=2"],
                  ["data.task_args.num_pairs=2", "data.source=task:mqar"]):  # fmt: skip
        assert build_config("recall", overrides=order).data.task_args == {"num_pairs": 2}
        assert build_config("quickstart", overrides=order).data.task_args == {"num_pairs": 2}
    in_file = tmp_path / "args.toml"
    in_file.write_text("[data]\ntask_args = {num_pairs = 8}\n")
    mqar = build_config("recall", in_file, ["data.source=task:mqar"])
    assert mqar.data.task_args == {"num_pairs": 8}
    kv = build_config("quickstart", in_file, ["data.source=task:kv_multi"])
    assert kv.data.task_args == {"num_pairs": 8}
    # set on a text source, they were silently ignored: now an error naming both settings
    with pytest.raises(ValueError, match=r"data.task_args apply only to a task source.*shakesp"):
        build_config("quickstart", overrides=["data.task_args.num_pairs=3"])
    both = tmp_path / "run.toml"
    both.write_text('[data]\ntask_args = {num_pairs = 3}\nsource = "builtin:shakespeare"\n')
    with pytest.raises(ValueError, match=r"data\.task_args apply only to a task source"):
        build_config("recall", both)


def test_a_run_saved_with_a_presets_ignored_task_arguments_still_resumes():
    """Before task arguments were refused on a text source, ``--preset recall --data FILE``
    saved the preset's beside it; the run ignored them, and may resume without them."""
    config = build_config("recall", overrides=["data.source=builtin:shakespeare"])
    saved = config.to_dict()
    saved["data"]["task_args"] = {"vocab_size": 32, "num_pairs": 4}
    assert RunConfig.from_dict(saved).data.task_args == saved["data"]["task_args"]
    assert resume_differences({"config": saved, "step": 0}, config, 1) == []
    saved["data"]["source"] = "task:kv_multi"  # a task run's arguments still count
    assert "data.source" in resume_differences({"config": saved, "step": 0}, config, 1)


def test_wrong_types_and_malformed_overrides_are_errors():
    with pytest.raises(ValueError, match=r"train\.steps takes a int"):
        build_config("debug", overrides=["train.steps=many"])
    with pytest.raises(ValueError, match="true, false or auto"):
        build_config("debug", overrides=["train.compile=3"])
    with pytest.raises(ValueError, match=r"train\.compile must be auto, true or false"):
        build_config("debug", overrides=["train.compile=sometimes"])
    with pytest.raises(ValueError, match=r"section\.field=value"):
        build_config("debug", overrides=["train.steps"])
    with pytest.raises(ValueError, match="debug"):
        build_config("debgu")


def test_config_files_toml_and_json(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('[model]\nname = "mag"\ndim = 40\n\n[train]\nsteps = 3\n')
    config = build_config("debug", toml, ["train.steps=5"])  # overrides come last
    assert config.model.name == "mag" and config.model.build().dim == 40
    assert config.train.steps == 5
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps(config.to_dict()))
    assert build_config("debug", as_json).to_dict() == config.to_dict()
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nsetps = 3\n")
    with pytest.raises(ValueError, match="steps"):
        build_config("debug", bad)


def test_round_trip_and_differences():
    config = build_config("debug")
    assert RunConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    other = build_config("debug", overrides=["train.steps=9", "data.mode=stream"])
    assert config_differences(config.to_dict(), other.to_dict()) == ["data.mode", "train.steps"]


@pytest.mark.parametrize(
    "saved_rows, saved_world, rows, world, ok",
    [(4, 2, 4, 2, True), (4, 2, 8, 1, True), (4, 2, 4, 1, False), (4, 1, 3, 1, False)],
)
def test_resume_needs_the_same_global_batch_even_with_the_same_rows(
    saved_rows, saved_world, rows, world, ok
):
    """Rows x processes is the global batch; the same rows on another world size change it."""
    saved = {"config": build_config("debug", overrides={"train.batch_size": saved_rows}).to_dict(),
             "world_size": saved_world}  # fmt: skip
    config = build_config("debug", overrides={"train.batch_size": rows})
    differ = resume_differences(saved, config, world)
    assert (
        differ == []
        if ok
        else differ
        == [
            f"train.batch_size (the global batch is rows x processes: {saved_rows} x "
            f"{saved_world} when saved, {rows} x {world} now)"
        ]
    )


@pytest.mark.parametrize(
    "toml, named",
    [
        ("[train]\nsteps = 3.5", "train.steps takes a int"),  # used to train 4 steps
        ("[train]\nsteps = 3.0", "train.steps takes a int"),
        ("[train]\nsteps = true", "train.steps takes a int"),
        ('[train]\nbatch_size = "4"', "train.batch_size takes a int"),  # a TOML string
        ('[model]\ndim = "64"', "dim must be an integer"),
        ('[train]\ncontrol = "null"', "train.control must name a model"),  # not None
        ("[train]\ncompile = 1", "train.compile takes true, false or auto"),
        ("[train]\nout_dir = 5", "train.out_dir takes a str"),
        ("[train]\ncontrol = 7", "train.control takes a str or null"),
        ("[data]\nsource = [1]", "data.source takes a str"),
        ("[data]\ntask_args = 5", "data.task_args takes a table"),
        ("[optim]\nlr = nan", "optim.lr must be a finite number"),
        ("[optim]\nlr = inf", "optim.lr must be a finite number"),
        ("[optim]\nbeta2 = 1.5", "optim.beta2"),
        ("[optim]\nwarmup_steps = -1", "optim.warmup_steps"),
        ("[train]\ngrad_clip = -inf", "train.grad_clip"),
        ("[train]\ndist_timeout = nan", "train.dist_timeout"),
        ("[train]\nthreads = -2", "train.threads"),
        ("[train]\nkeep_last = 0", "train.keep_last"),
        ("[train]\nseed = -1", "train.seed"),
        ("[data]\nval_fraction = nan", "data.val_fraction"),
        ("[data]\nstream_tokens = -8", "data.stream_tokens"),
        ("[model]\ndim = 3.5", "dim"),
        ("[model]\nlr_max = nan", "lr_max"),
        # a section that is not a table: was "unknown setting 'model'" / a TypeError
        ("model = 5", "[model] must be a table of settings, got 5"),
        ("train = [1]", "[train] must be a table of settings"),
        ("[model]\noverrides = 5", "[model] overrides must be a table, got 5"),
    ],
)
def test_config_file_values_are_checked_like_set_overrides(tmp_path, toml, named):
    path = tmp_path / "run.toml"
    path.write_text(toml + "\n")
    with pytest.raises(ValueError, match=re.escape(named)):
        build_config("debug", path)


@pytest.mark.parametrize(
    "override, named",
    [
        ("train.steps=3.5", "train.steps takes a int"),
        ("optim.lr=NaN", "optim.lr must be a finite number"),
        ("optim.lr=Infinity", "optim.lr must be a finite number"),
        ("train.grad_clip=-1", "train.grad_clip"),
        ("data.val_fraction=NaN", "data.val_fraction"),
    ],
)
def test_set_refuses_non_finite_and_fractional_values(override, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        build_config("debug", overrides=[override])


def test_json_config_with_nan_is_refused(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"optim": {"lr": NaN}}')
    with pytest.raises(ValueError, match=r"optim\.lr"):
        build_config("debug", path)


def test_a_config_file_that_is_not_text_is_named(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(b"\xff\xfe[train]\n")
    with pytest.raises(ValueError, match="cannot read config file"):
        build_config("debug", path)
