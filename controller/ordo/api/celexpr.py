"""CEL expressions of AgentPolicy `toolRules[].when` (issue 26 §6): compiled when the policy is
read, evaluated per tool call within a cost budget.

The library is cel-python (`celpy`, pure Python; docs/decisions.md says why). Neither Python CEL
library enforces CEL cost limits, so the bounds are ours:

- at compile time: the text is at most MAX_EXPRESSION_CHARS, its parse tree at most
  MAX_TREE_DEPTH levels and MAX_TREE_NODES nodes, at most MAX_MACRO_NESTING macros
  (`all`, `exists`, `exists_one`, `map`, `filter`) nest; only the variables VARIABLES (and
  macro variables) and the functions in FUNCTIONS / METHODS are known: anything else does not
  compile (a misspelt variable would otherwise only fail at evaluation);
- at evaluation: the variables hold at most MAX_INPUT_VALUES values; every parse-tree node visited costs 1, plus 1 per COST_CHARS characters (or
  items) of each string, bytes, list or map value a node produces, against EVAL_BUDGET; a
  run over it is an evaluation error (fail closed, engine/toolrules.py). The input is the
  call's parsed arguments, which the engine's JSON caps already bound (engine/jsontext.py:
  1,000,000 characters, depth 64). CEL has no string or list repetition (`"a" * 9` is a type
  error), and `matches` runs on RE2 (linear time), so a budgeted run is bounded in time:
  bench/celrules.py measures the worst case (docs/governance.md publishes it).

A result that is not a bool is an evaluation error too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import Activation, CELEvalError, Evaluator

Tree = lark.Tree[Any]

VARIABLES = ("args", "agent", "task", "step", "usage")
"""What `when` can read: the call's parsed arguments, the Agent and the Task (`name`,
`labels`), the step number, and the run's usage so far (`inputTokens`, `outputTokens`,
`totalTokens`)."""

MAX_EXPRESSION_CHARS = 1024
"""The CRD's maxLength of `toolRules[].when`."""
MAX_TREE_DEPTH = 100
"""Parse-tree levels; a comparison of a field is about 14, each parenthesis adds 10. The
interpreter recurses about 5 frames a level, so this keeps an evaluation within 500 frames of
Python's default recursion limit (1,000)."""
MAX_TREE_NODES = 2000
MAX_MACRO_NESTING = 2
"""Macros inside macros: `args.items.all(i, i.tags.exists(t, t == 'x'))` is 2 deep; a third
level would make the cost of one call cubic in the size of its arguments."""
EVAL_BUDGET = 10_000
"""Cost units one evaluation may spend (see the module docstring); one unit is a few
microseconds of interpretation (bench/celrules.py)."""
COST_CHARS = 1024
"""A value produced costs 1 unit per this many characters or items, so the strings one
evaluation can build stay within EVAL_BUDGET x COST_CHARS characters (about 10 MB)."""
MAX_INPUT_VALUES = 5_000
"""Values (scalars, lists and maps) of the variables one evaluation may read: converting them
to CEL values costs microseconds each, before any budget applies. Arguments with more values
are an evaluation error (`ArgumentsTooLarge`), handled as any other (fail closed)."""

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
FUNCTIONS = frozenset(
    {"size", "int", "uint", "double", "string", "bool", "bytes", "has", "type", "dyn"}
)
"""Global functions a rule may call."""
METHODS = frozenset({"size", "contains", "startsWith", "endsWith", "matches"}) | MACROS
"""Receiver-style functions (`args.name.startsWith('x')`)."""
TYPE_NAMES = frozenset({"int", "uint", "double", "string", "bool", "bytes", "list", "map"})
"""Identifiers that name a type (`type(args.amount) == int`)."""

_REFUSED_NODES = {
    "member_object": "message construction (`Type{...}`) is not supported",
    "dot_ident": "root-scoped names (`.name`) are not supported",
    "dot_ident_arg": "root-scoped functions (`.f()`) are not supported",
}

_LIMIT = sys.getrecursionlimit()
_ENV = celpy.Environment()  # it raises the process's recursion limit to 2500: undone
sys.setrecursionlimit(_LIMIT)  # (MAX_TREE_DEPTH keeps evaluation within Python's default)


class CelError(ValueError):
    """An expression that does not compile, or a rule the limits refuse."""


class EvaluationError(Exception):
    """An evaluation that failed: a type error, a missing field, a non-bool result, or the
    budget spent. The message names the kind only, never a value of the arguments."""


@dataclass(frozen=True, slots=True, eq=False)
class Program:
    """A compiled `when` expression (shared, immutable)."""

    source: str
    tree: Tree = field(repr=False)


def _children(tree: Tree) -> Iterator[Tree]:
    return (c for c in tree.children if isinstance(c, lark.Tree))


def _check_shape(tree: Tree) -> None:
    """Depth and size, iteratively (a deep tree must not exhaust Python's recursion)."""
    stack = [(tree, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_TREE_DEPTH:
            raise CelError(f"the expression nests too deeply (over {MAX_TREE_DEPTH} levels)")
        if nodes > MAX_TREE_NODES:
            raise CelError(f"the expression is too large (over {MAX_TREE_NODES} parse nodes)")
        stack.extend((c, depth + 1) for c in _children(node))


def _token(tree: Tree, index: int) -> str:
    child = tree.children[index]
    return str(child.children[0]) if isinstance(child, lark.Tree) else str(child)


def _macro_variable(exprlist: Tree | None) -> str | None:
    """The variable of `x.all(v, ...)`: the first argument, a bare identifier."""
    if exprlist is None or len(exprlist.children) != 2:
        return None
    first = exprlist.children[0]
    assert isinstance(first, lark.Tree)
    idents = list(first.find_data("ident"))
    return str(idents[0].children[0]) if len(idents) == 1 else None


def _check_names(tree: Tree, bound: frozenset[str], macros: int) -> None:
    """Known variables and functions only, macros nested at most MAX_MACRO_NESTING deep."""
    kind = tree.data
    if kind in _REFUSED_NODES:
        raise CelError(_REFUSED_NODES[str(kind)])
    if kind == "ident":
        name = _token(tree, 0)
        if name not in bound and name not in VARIABLES and name not in TYPE_NAMES:
            raise CelError(f"unknown variable {name!r}: a rule can read {', '.join(VARIABLES)}")
        return
    if kind == "ident_arg":
        name = str(tree.children[0])
        if name not in FUNCTIONS:
            raise CelError(f"unknown function {name}()")
    if kind == "member_dot_arg":
        name = str(tree.children[1])
        if name not in METHODS:
            raise CelError(f"unknown function .{name}()")
        if name in MACROS:
            args = tree.children[2] if len(tree.children) > 2 else None
            variable = _macro_variable(args if isinstance(args, lark.Tree) else None)
            if variable is None:
                raise CelError(f".{name}() takes a variable name and an expression")
            if macros + 1 > MAX_MACRO_NESTING:
                raise CelError(f"macros nest more than {MAX_MACRO_NESTING} deep")
            receiver = tree.children[0]
            assert isinstance(receiver, lark.Tree) and isinstance(args, lark.Tree)
            _check_names(receiver, bound, macros)
            body = args.children[1]
            assert isinstance(body, lark.Tree)
            _check_names(body, bound | {variable}, macros + 1)
            return
    for child in _children(tree):
        _check_names(child, bound, macros)


def compile_expression(source: str) -> Program:
    """Parse and check `source`; raises CelError with a message fit for a condition."""
    if len(source) > MAX_EXPRESSION_CHARS:
        raise CelError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = _ENV.compile(source)
    except CELParseError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise CelError(f"does not parse: {first[:200]}") from None
    except Exception as exc:  # lark's own errors on odd input: never let one escape as a crash
        raise CelError(f"does not parse ({type(exc).__name__})") from None
    _check_shape(tree)
    _check_names(tree, frozenset(), 0)
    return Program(source, tree)


class Meter:
    """A cost budget; one may be shared by several evaluations (their total is bounded)."""

    __slots__ = ("left",)

    def __init__(self, budget: int) -> None:
        self.left = budget

    def charge(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise EvaluationError("CostLimitExceeded")


class _MeteredEvaluator(Evaluator):
    """celpy's interpreter with every node visit charged to a shared meter (macro bodies
    included: they run in sub-evaluators that share it)."""

    def __init__(self, ast: Tree, activation: Activation, meter: Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def sub_evaluator(self, ast: Tree) -> Evaluator:
        return _MeteredEvaluator(ast, self.activation, self.meter)

    def _visit_tree(self, tree: Tree) -> Any:
        self.meter.charge(1)
        value = super()._visit_tree(tree)
        if isinstance(value, str | bytes | list | dict):
            self.meter.charge(len(value) // COST_CHARS)
        return value


def _error_kind(exc: BaseException) -> str:
    """A CEL evaluation error reduced to its kind (the library's text quotes values)."""
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    cause = args[1] if len(args) > 1 and isinstance(args[1], type) else None
    if cause is KeyError:
        return "NoSuchField"
    if cause is TypeError:
        return "NoMatchingOverload"
    if cause is ZeroDivisionError:
        return "DivisionByZero"
    return "EvaluationFailed"


def _to_cel(value: Any) -> Any:
    """A JSON value as a CEL value: JSON integers are `int`, other numbers `double` (compare
    with `double(args.x) > 1.5` when a model may send either)."""
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        return celtypes.ListType([_to_cel(v) for v in value])
    if isinstance(value, dict):
        return celtypes.MapType({celtypes.StringType(k): _to_cel(v) for k, v in value.items()})
    if value is None:
        return None
    raise EvaluationError("UnsupportedValue")


def count_values(variables: Mapping[str, Any], limit: int = MAX_INPUT_VALUES) -> int:
    """How many values `variables` hold (lists, maps and scalars), counting stops past
    `limit`; without recursion."""
    stack = list(variables.values())
    seen = 0
    while stack and seen <= limit:
        value = stack.pop()
        seen += 1
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return seen


@dataclass(frozen=True, slots=True)
class Inputs:
    """Variables converted to CEL values once, for every rule of a call."""

    values: dict[str, Any]


def prepare(variables: Mapping[str, Any]) -> Inputs:
    """`variables` (plain JSON-like values) as CEL values; EvaluationError
    (`ArgumentsTooLarge`) past MAX_INPUT_VALUES."""
    if count_values(variables) > MAX_INPUT_VALUES:
        raise EvaluationError("ArgumentsTooLarge")
    return Inputs({name: _to_cel(value) for name, value in variables.items()})


def evaluate(
    program: Program, variables: Mapping[str, Any] | Inputs, budget: int | Meter = EVAL_BUDGET
) -> bool:
    """The value of `program` over `variables` (plain values, or `prepare`d ones). Raises
    EvaluationError for anything but a bool result within `budget` (units, or a Meter that
    other evaluations share)."""
    inputs = variables if isinstance(variables, Inputs) else prepare(variables)
    activation = Activation(annotations=_ENV.annotations, package=_ENV.package)
    meter = budget if isinstance(budget, Meter) else Meter(budget)
    evaluator = _MeteredEvaluator(program.tree, activation, meter)
    try:
        value = evaluator.evaluate(dict(inputs.values))
    except EvaluationError:
        raise
    except CELEvalError as exc:
        raise EvaluationError(_error_kind(exc)) from None
    except RecursionError:  # MAX_TREE_DEPTH should prevent it; fail closed if not
        raise EvaluationError("NestingTooDeep") from None
    except Exception as exc:  # a library bug must fail closed, not crash the run
        raise EvaluationError(type(exc).__name__) from None
    if not isinstance(value, celtypes.BoolType):
        raise EvaluationError("NotABool")
    return bool(value)
