"""The lm-evaluation-harness adapter: its three methods against values computed by hand from
one whole model call, and ``lm_eval.simple_evaluate(model="titans")`` on tasks built locally
(a JSON file and task YAMLs in a temporary folder; no hub)."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")

import lm_eval
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from titans_atlas import create_model
from titans_atlas.eval.lm_harness import TitansLM
from titans_atlas.generation import generate
from titans_atlas.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def model():
    return create_model("mac", preset="debug", window=16, chunk_size=8).eval()


def request(kind, *args):
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


@torch.no_grad()
def logprobs_of(model, ids, first):
    """Sum of log p(ids[t] | ids[:t]) for t >= first, from one whole call."""
    logits, _ = model(torch.tensor([ids]))
    logp = F.log_softmax(logits[0, :-1].double(), dim=-1)
    targets = torch.tensor(ids[1:])
    picked = logp.gather(1, targets[:, None])[:, 0]
    return float(picked[first - 1 :].sum()), bool((logp.argmax(-1) == targets)[first - 1 :].all())


def test_loglikelihood_equals_one_whole_call(model):
    lm = TitansLM(model=model, tokenizer=TOK, piece_size=5)
    context, continuation = "The cat sat on the ", "mat and slept."
    ((value, greedy),) = lm.loglikelihood([request("loglikelihood", context, continuation)])
    # the trailing space moves into the continuation
    ids = TOK.encode(context + continuation)
    expected, expected_greedy = logprobs_of(model, ids, len(context) - 1)
    assert value == pytest.approx(expected, rel=1e-5) and greedy == expected_greedy


def test_rolling_loglikelihood_streams_the_whole_text(model):
    lm = TitansLM(model=model, tokenizer=TOK, piece_size=7)
    text = "A longer text, streamed in pieces with the state carried across them. " * 3
    (value,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", text)])
    ids = TOK.encode("\n" + text)  # bytes have no end-of-text token: "\n" starts the stream
    assert value == pytest.approx(logprobs_of(model, ids, 1)[0], rel=1e-5)
    assert value < 0 and math.isfinite(value)


def test_generate_until_is_greedy_and_stops_at_the_stop_string(model):
    lm = TitansLM(model=model, tokenizer=TOK)
    prompt = "Once upon a time"
    ids = generate(model, torch.tensor([TOK.encode(prompt)]), 12, greedy=True)[0, len(prompt) :]
    full = TOK.decode(ids.tolist())
    (out,) = lm.generate_until(
        [request("generate_until", prompt, {"until": [], "max_gen_toks": 12})]
    )
    assert out == full
    stop = full[3:5]
    (cut,) = lm.generate_until(
        [request("generate_until", prompt, {"until": [stop], "max_gen_toks": 12})]
    )
    assert cut == full[: full.index(stop)]
    with pytest.raises(ValueError, match="greedily"):
        lm.generate_until(
            [request("generate_until", prompt, {"do_sample": True, "temperature": 1.0})]
        )


def write_tasks(folder):
    rows = [
        {
            "context": "The cat sat on the",
            "choices": [" mat", " moon"],
            "label": 0,
            "text": "Some text.",
            "q": "Hi:",
            "a": " hi",
        },
        {
            "context": "Two plus two is",
            "choices": [" four", " five"],
            "label": 0,
            "text": "More text here.",
            "q": "Yo:",
            "a": " yo",
        },
    ]
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = (
        f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
    )
    (folder / "mc.yaml").write_text(
        "task: titans_mc\n" + common + "output_type: multiple_choice\ndoc_to_text: '{{context}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{label}}'\nmetric_list:\n"
        "  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    (folder / "roll.yaml").write_text(
        "task: titans_roll\n" + common + "output_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: bits_per_byte\n"
        "    aggregation: bits_per_byte\n    higher_is_better: false\n"
    )
    (folder / "gen.yaml").write_text(
        "task: titans_gen\n" + common + "output_type: generate_until\ndoc_to_text: '{{q}}'\n"
        "doc_to_target: '{{a}}'\ngeneration_kwargs:\n  until: ['\\n']\n  max_gen_toks: 4\n"
        "  do_sample: false\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n"
        "    higher_is_better: true\n"
    )


def test_simple_evaluate_runs_local_tasks_through_the_registry(model, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    directory = tmp_path / "ckpt"
    model.save_pretrained(str(directory))
    write_tasks(tmp_path)
    results = lm_eval.simple_evaluate(
        model="titans",
        model_args=f"checkpoint={directory}",
        tasks=["titans_mc", "titans_roll", "titans_gen"],
        task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
    )["results"]
    assert results["titans_mc"]["acc,none"] in (0.0, 0.5, 1.0)
    # bits per byte over both texts, by hand: -sum log p / ln 2 / bytes
    texts = ["Some text.", "More text here."]
    nats = -sum(logprobs_of(model, TOK.encode("\n" + t), 1)[0] for t in texts)
    expected = nats / math.log(2) / sum(len(t) for t in texts)
    assert results["titans_roll"]["bits_per_byte,none"] == pytest.approx(expected, rel=1e-4)
    assert results["titans_gen"]["exact_match,none"] in (0.0, 0.5, 1.0)
