"""The benchmarks' own answer metrics, as pure functions on strings.

* RULER (``string_match_all``): the fraction of reference strings found in the prediction,
  case-insensitive, after RULER's post-processing (strip; control characters -> newline).
* BABILong (``compare_answers`` of its ``metrics.py``): lower-case the output, keep the text
  before the first ``.``, cut at ``<context>``, ``<example>`` and ``Question``; the task's
  labels found in it, minus those that also occur in the question, must be exactly the target.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..tasks.babilong import BABILONG_LABELS, babilong_labels  # noqa: F401  (their home)

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f]")


def percent(fraction: float | None) -> float | None:
    """A score in [0, 1] as a percentage with two decimals, as the summaries report it (None,
    a cell with no sample, stays None)."""
    return None if fraction is None else round(100.0 * fraction, 2)


def ruler_postprocess(prediction: str) -> str:
    """RULER's ``postprocess_pred``: strip, control characters -> newline, strip."""
    return _CONTROL_CHARACTERS.sub("\n", prediction.strip()).strip()


def ruler_string_match_all(prediction: str, references: Sequence[str]) -> float:
    """Fraction in [0, 1] of ``references`` contained in ``prediction`` (case-insensitive).
    RULER reports the mean over samples x 100."""
    if not references:
        raise ValueError("references must hold at least one string")
    prediction = ruler_postprocess(prediction).lower()
    return sum(ref.lower() in prediction for ref in references) / len(references)


def babilong_preprocess_output(output: str) -> str:
    """BABILong's ``preprocess_output``, step for step. Its last cut looks for ``Question``
    after lower-casing, so it never fires; kept so that our scores equal the benchmark's."""
    output = output.lower()
    output = output.split(".")[0]
    output = output.split("<context>")[0]
    output = output.split("<example>")[0]
    return output.split("Question")[0]


def babilong_compare_answers(
    target: str, output: str, question: str, task_labels: Iterable[str]
) -> bool:
    """True iff the target is the only task label in the (pre-processed) output once the
    labels that also occur in the question are removed (mentions in questions are never
    targets)."""
    output = babilong_preprocess_output(output)
    labels = {label.lower() for label in task_labels}
    in_question = {label for label in labels if label in question.lower()}
    in_output = {label for label in labels if label in output} - in_question
    return in_output == {target.lower()}
