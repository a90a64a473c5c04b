"""How much of the answer loss's gradient reaches distant input tokens at initialisation
(research/LOG.md, section 1: why `mac` fails the recall task).

For each model, one batch of the recall preset's task at initialisation: the gradient norm of
the loss with respect to each input embedding, summed over the tokens more than 16 positions
before a row's first answer, divided by the sum over the 8 tokens before it. A model whose
distant tokens get no gradient cannot learn to recall them.

    python research/experiments/gradient_reach.py > docs/results/gradient_reach.txt
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _common import QUIET  # experiments/ is on sys.path when run

from titans_atlas.tasks import IGNORE
from titans_atlas.train import Trainer, build_config

MODELS = ("mac", "mag", "mal", "lmm")


def far_near_ratio(name: str) -> float:
    overrides = [f"model.name={name}", "train.control=null", f"train.out_dir=runs/reach-{name}"]
    trainer = Trainer(build_config("recall", overrides=overrides + QUIET))
    model, batch = trainer.model.train(), trainer.pipeline.train.next()
    embedded = {}

    def keep(module, inputs, output):  # the embeddings, kept to read their gradient
        output.retain_grad()
        embedded["x"] = output

    handle = model.embed.register_forward_hook(keep)
    logits, _ = model(batch.inputs)
    handle.remove()
    F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE).backward()
    reach = embedded["x"].grad.norm(dim=-1)  # [B, T]
    first = (batch.labels != IGNORE).float().argmax(dim=1)  # each row's first answer
    far = sum(reach[row, : max(0, int(t) - 16)].sum() for row, t in enumerate(first))
    near = sum(reach[row, max(0, int(t) - 8) : int(t) + 1].sum() for row, t in enumerate(first))
    return float(far / near)


def main() -> None:
    torch.manual_seed(0)
    print("| model | gradient reaching tokens > 16 back / the last 8 |")
    print("|---|---|")
    for name in MODELS:
        print(f"| {name} | {far_near_ratio(name):.3f} |")


if __name__ == "__main__":
    main()
