"""The cost of AgentPolicy toolRules (issue 26 §6): compile and evaluate times, the typical
rule against the worst cases the bounds of api/celexpr.py allow.

    .venv/bin/python -m bench.celrules [--repeat 5]

Prints, for each case, the best of `--repeat` wall times of one evaluation (or compile) and
its ratio to a typical rule (`args.amount > 100`). The first worst case is what one rule can
hold the event loop for (engine/toolrules.py: small inputs, the on-loop budget); the others
run in a thread (off the loop) in the engine. The worst cases are what an adversarial
policy author and model together can do within the bounds: a quadratic rule over the largest
list the input cap lets in, stopped by the budget; strings built in a macro, stopped by the
budget; the largest input converted for a trivial rule; an RE2 match over a 1 MB argument.
Figures are published in docs/governance.md ("Tool rules"); run on an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from typing import Any

from ordo.api.celexpr import (
    EVAL_BUDGET,
    MAX_INPUT_VALUES,
    EvaluationError,
    compile_expression,
    evaluate,
)
from ordo.engine.toolrules import ON_LOOP_BUDGET, ON_LOOP_VALUES

LONGEST = " && ".join(f"args.a{i}.size() < {i + 100}" for i in range(40))[:1000].rsplit(" &&", 1)[0]


def _best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with contextlib.suppress(EvaluationError):  # a budget or input-cap stop is measured
            fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _eval(source: str, args: Any, budget: int = EVAL_BUDGET) -> Callable[[], Any]:
    program = compile_expression(source)
    return lambda: evaluate(program, {"args": args}, budget)


def cases() -> list[tuple[str, Callable[[], Any]]]:
    ints = list(range(MAX_INPUT_VALUES - 2))
    small = list(range(ON_LOOP_VALUES - 10))
    return [
        ("typical: args.amount > 100", _eval("args.amount > 100", {"amount": 150})),
        (
            "on the loop: quadratic over 490 ints (on-loop budget stop)",
            _eval("args.l.exists(x, args.l.exists(y, x == y + 1))", {"l": small}, ON_LOOP_BUDGET),
        ),
        ("compile: a 1,000-character rule", lambda: compile_expression(LONGEST)),
        (
            "quadratic exists over 4,998 ints (budget stop)",
            _eval("args.l.exists(x, args.l.exists(y, x == y + 1))", {"l": ints}),
        ),
        (
            "map building 2 MB strings (budget stop)",
            _eval("args.l.map(x, args.s + args.s).size() > 0", {"l": ints[:100], "s": "a" * 10**6}),
        ),
        ("trivial rule over 4,998 int arguments (conversion)", _eval("true", {"l": ints})),
        (
            "matches('^(a+)+$') over a 1 MB string (RE2)",
            _eval("args.s.matches('^(a+)+$')", {"s": "a" * 10**6 + "b"}),
        ),
        ("arguments over the input cap (refused)", _eval("true", {"l": [*ints, 0, 0, 0]})),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args(argv)
    print(
        f"budget {EVAL_BUDGET} units (on the loop {ON_LOOP_BUDGET}), input cap "
        f"{MAX_INPUT_VALUES} values (on the loop {ON_LOOP_VALUES})"
    )
    base = None
    for name, fn in cases():
        seconds = _best(fn, opts.repeat)
        base = base or seconds
        print(f"{name:55s} {seconds * 1000:10.3f} ms  {seconds / base:10.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
