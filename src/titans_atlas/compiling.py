"""When to ``torch.compile``: the choice behind ``train.compile = "auto"`` and the decoding of
``titans generate`` / ``titans eval`` (``--compile auto``), and the fallback to eager when
compilation fails.

Compiling costs a fixed time up front (tens of seconds to a few minutes on a CPU, the cold
inductor cache being the slow end) and then saves a fraction of every step. "auto" compiles
only where that pays, from measurements (docs/benchmarks.md, "What you get by default"):

- **training** knows its length: it compiles when at least ``TRAIN_PAYS_AFTER_STEPS`` steps
  are left (a compile costs about as much as a fixed number of eager steps, however loaded
  the machine, so the break-even is a step count);
- **decoding** does not know how many tokens will follow (interactive turns, an evaluation's
  next sample), so it rents before it buys: it decodes ``DECODE_PAYS_AFTER_STEPS`` steps eager
  (about the compile's cost), then compiles -- within about 2.5x the better choice's time
  for the models measured, whatever comes next (the ski-rental rule).

Either way a compile that raises is not a crash: one line says why and the work goes on
eager (the Trainer redoes the failed step; ``DecodeStep`` uses ``guarded_call``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._triton import has_triton

from .ops import validating

# Measured (docs/benchmarks.md, "What you get by default", benchmarks/compile_break_even.py):
# with a cold inductor cache a compile takes as long as a fixed number of eager steps, whatever
# the machine's load (both stretch alike) -- 348 for the recall preset's lmm, 980 for the
# quickstart MAG, ~350 for the MAC benchmark -- and a compiled step then takes 0.65-0.68x an
# eager one. Compiling pays after 1,005, 3,060 and ~1,100 steps; from 3,000 it pays (or
# nearly) in every case measured, and with a warm cache from a few hundred.
TRAIN_PAYS_AFTER_STEPS = 3000
# Measured the same way (benchmarks/decode_break_even.py), a cold compile of every graph a
# decoding stream needs costs as much as a fixed number of eager one-token steps whatever the
# model's depth: 10,000-10,900 for MAC at depth 1, 2 and 4 (93-265 s on a loaded machine),
# 6,900 for the lmm. Renting for that many steps keeps decoding within about 2.5x the
# better choice's time for both; no threshold in seconds does (the compile grows with depth).
DECODE_PAYS_AFTER_STEPS = 8000


def check_compile_setting(name: str, value: Any) -> bool | str:
    """``value`` as one of "auto" / True / False (the strings "true"/"false"/"on"/"off" as the
    command line writes them); anything else is refused by ``name``."""
    if isinstance(value, str):
        lowered = value.strip().lower()
        words = {"auto": "auto", "true": True, "on": True, "false": False, "off": False}
        if lowered in words:
            return words[lowered]
    elif isinstance(value, bool):
        return value
    raise ValueError(f"{name} must be auto, true or false, got {value!r}")


def compile_unavailable(device: torch.device | str) -> str | None:
    """Why ``torch.compile`` cannot be expected to work here, or None when it can: dynamo must
    support this Python, and inductor needs a C++ compiler on CPU and Triton on CUDA. MPS is
    left eager (inductor's Metal backend is still a prototype)."""
    kind = torch.device(device).type
    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile does not support Python {sys.version.split()[0]} here"
    if kind == "cpu":
        compilers = [os.environ.get("CXX"), "c++", "g++", "clang++", "cl"]
        if not any(name and shutil.which(name) for name in compilers):
            return "no C++ compiler found (inductor needs one on CPU; set CXX or install g++)"
        return None
    if kind == "cuda":
        return None if has_triton() else "Triton is not installed (inductor needs it on CUDA)"
    return f"auto compiles on CPU and CUDA only, not on {kind}"


@dataclass
class TrainCompileChoice:
    """What ``train.compile`` resolved to, and why (the banner shows ``reason``)."""

    setting: bool | str
    use: bool
    reason: str

    @classmethod
    def decide(
        cls, setting: bool | str, device: torch.device | str, steps_left: int
    ) -> TrainCompileChoice:
        """``setting`` for a run with ``steps_left`` steps to go on ``device``."""
        if setting is False:
            return cls(setting, False, "train.compile=false")
        if setting is True:  # asked for: tried even where it may not work, and falls back
            return cls(setting, True, "train.compile=true")
        missing = compile_unavailable(device)
        if missing is not None:
            return cls(setting, False, f"auto: eager, {missing}")
        pays = steps_left >= TRAIN_PAYS_AFTER_STEPS
        verdict = "compiled" if pays else "eager"
        return cls(
            setting, pays,
            f"auto: {verdict}, {steps_left} steps to go (compiling pays from "
            f"~{TRAIN_PAYS_AFTER_STEPS})",
        )  # fmt: skip


def fallback_message(err: BaseException) -> str:
    """One line saying that compilation failed and the run goes on eager."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"torch.compile failed ({type(err).__name__}: {first[:200]}); continuing eager"


class DecodeStep:
    """``step(token [B, 1], state) -> (logits [B, 1, V], state)`` for a decoding loop, with
    ``compile`` = "auto" / True / False. "auto" decodes ``pays_after_steps`` steps eager (across
    every stream this object decodes), then compiled (built by ``make_compiled``); a step of
    a larger batch costs more eager time for the same compile, so there the rule errs towards
    eager. A compiled step that raises is dropped for eager with one line on
    ``warn``. Eager and compiled steps compute the same function. It continues a stream whose
    state a prefill has checked: the eager step skips the memory layers' per-call value
    checks (NaN, gate ranges; a host sync each, 17% of a MAC decode step), as a compiled step
    always has -- token ids are still checked at the model's boundary."""

    def __init__(
        self,
        model: Callable,
        make_compiled: Callable[[], Callable],
        compile: bool | str = "auto",
        device: torch.device | str = "cpu",
        pays_after_steps: float = DECODE_PAYS_AFTER_STEPS,
        warn: Callable[[str], None] | None = None,
    ):
        self.setting = check_compile_setting("compile", compile)
        self.model, self.make_compiled = model, make_compiled
        steps = pays_after_steps
        if isinstance(steps, bool) or not isinstance(steps, (int, float)) or not steps >= 0:
            raise ValueError(f"pays_after_steps must be a number >= 0, got {pays_after_steps!r}")
        self.pays_after_steps, self.eager_steps = pays_after_steps, 0
        self.warn = warn if warn is not None else _stderr
        self.compiled: Callable | None = None
        self.reason = "compile=false" if self.setting is False else "compile=true"
        self.failed = False
        if self.setting == "auto":
            missing = compile_unavailable(device)
            self.failed = missing is not None  # never tried
            self.reason = f"auto: {missing}" if missing else "auto: eager until it would pay"
        if self.setting is True:
            self.compiled = make_compiled()

    def __call__(self, token: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        if self.compiled is None and self._pays():
            self.compiled = self.make_compiled()
            self.reason = f"auto: compiled after {self.eager_steps} eager decode steps"
            self.warn(f"compile: {self.reason}")
        if self.compiled is not None:
            ok, result = guarded_call(self.compiled, (token, state), self.warn)
            if ok:
                return result
            self.compiled, self.failed = None, True
            self.reason = "compile failed: eager"
        with validating(False):
            result = self.model(token, state)
        self.eager_steps += 1
        return result

    @property
    def is_compiled(self) -> bool:
        return self.compiled is not None

    def _pays(self) -> bool:
        return (
            self.setting == "auto" and not self.failed
            and self.eager_steps >= self.pays_after_steps
        )  # fmt: skip


def guarded_call(
    compiled: Callable, args: tuple, warn: Callable[[str], None] | None = None
) -> tuple[bool, Any]:
    """``(True, compiled(*args))``, or ``(False, None)`` after one line on ``warn`` when it
    raises: compilation happens on a compiled function's first calls, so that is where it
    fails. A genuine error in the model raises again from the eager call that follows."""
    try:
        return True, compiled(*args)
    except Exception as err:  # any compiler failure: backend, dynamo, a missing toolchain
        (warn or _stderr)(fallback_message(err))
        return False, None


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
