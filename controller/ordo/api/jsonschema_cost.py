"""A static upper bound on the work of evaluating a user's JSON Schema, per value of the
instance (see `ordo.api.jsonschemas`, which refuses a schema over `MAX_SCHEMA_COST`).

The unit is the fuel of `ordo.api.jsonschema_fuel`: what one keyword application spends (1,
plus the size of what it loops over). The model follows how jsonschema evaluates:

- in-place applicators (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
  `dependentSchemas`, `dependencies`) and references (`$ref`, and every target a
  `$dynamicRef` / `$recursiveRef` may rebind to) evaluate their subschemas on the same value,
  so their costs add up, and multiply along chains: `anyOf` x10 five levels deep is 10^5
  evaluations of the innermost subschema on one value;
- `unevaluatedProperties` / `unevaluatedItems` walk the in-place subschemas again, validating
  every branch of `allOf`/`anyOf`/`oneOf`/`if` before descending into it (jsonschema's
  `find_evaluated_*_by_schema`, copied in `ordo.api.jsonschema_keywords`): modelled as a second
  and third mode of every subschema (`jsonschema_costgraph.FIND_KEYS`, `FIND_INDEXES`);
- input-consuming keywords (`properties`, `patternProperties`, `additionalProperties`,
  `items`, `prefixItems`, `contains`, `propertyNames`, ...) evaluate subschemas on the members.
  The bound is per value at each depth below the root: the member named `k` is evaluated by
  every in-place subschema whose `properties` name `k` (or whose `additionalProperties`,
  `patternProperties`, `unevaluatedProperties` may apply), so two branches that both recurse
  into the same member double the work at every level of nesting, exponential in the depth of
  the instance (capped at `MAX_INSTANCE_DEPTH`), while a tagged union whose branches recurse
  through different property names stays linear;
- `uniqueItems` hashes every value below the array once (linear, `json_key`).

`cost(walk, keywords)` computes, for depth h = 0 .. `MAX_INSTANCE_DEPTH`, the most work done
at one value h levels below the root, and returns the maximum, or a problem naming the JSON path
where the bound is crossed. Pure, no recursion; each depth costs time linear in the schema size,
and the iteration stops at a fixed point (most schemas after a few depths). The graph of
subschemas and modes is built in `ordo.api.jsonschema_costgraph`, the per-depth iteration is
`ordo.api.jsonschema_costlevels`; this module runs them and words the problem.
"""

from __future__ import annotations

from dataclasses import dataclass

from .jsonschema_costgraph import VALIDATE, Graph
from .jsonschema_costlevels import MAP_CAP, Costs
from .jsonschema_keywords import keyword_weight
from .jsonschema_walk import Walk, json_path

MAX_SCHEMA_COST = 10_000
"""Most units of work the evaluation of one value may cost (see docs/security.md). A schema
whose bound is over it is refused, naming the subschema where the bound is crossed."""

MAX_INSTANCE_DEPTH = 64
"""How deep an instance nests (the parsers' cap, `ordo.engine.jsontext.MAX_JSON_DEPTH`)."""

_MODE_NOTE = (
    "",
    " (as unevaluatedProperties re-evaluates it)",
    " (as unevaluatedItems re-evaluates it)",
)


@dataclass(frozen=True)
class Cost:
    units: int
    """The bound: most units of work one value of an instance may cost (capped just past
    `bound` when the schema is refused)."""
    problem: str | None


def cost(walk: Walk, known: frozenset[str], dialect: str, bound: int = MAX_SCHEMA_COST) -> Cost:
    """The bound of a schema `walk` checked (no other problems), for the keywords `known` to
    its draft's validator class."""
    graph = Graph(walk, known, dialect)
    root = graph.v(())
    costs = Costs(graph, root, bound)
    x0 = costs.level0()
    costs.history.append((x0, [None] * len(x0)))
    if x0[root] > bound:
        return Cost(x0[root], _problem(costs, graph, root, 0, bound))
    peak = x0[root]
    below = x0
    step: list[int] | None = None
    next_try = 3  # the linear test costs a level: after a miss, try again twice as deep
    for h in range(1, MAX_INSTANCE_DEPTH + 1):
        x = costs.level(h, below, x0)
        if x[root] > bound:
            return Cost(x[root], _problem(costs, graph, root, h, bound))
        peak = max(peak, x[root])
        if (h >= 3 and x == below) or not any(x):
            break  # a fixed point: every deeper level costs the same (or nothing)
        if h >= 3:
            d = [a - b for a, b in zip(x, below, strict=True)]
            if d == step and h >= next_try:
                if _linear(costs, h, d, x0):
                    # X_{h+k} <= X_h + k*d for every k: the remaining depths add at most this
                    projected = x[root] + (MAX_INSTANCE_DEPTH - h) * max(d[root], 0)
                    if projected <= bound:
                        return Cost(max(peak, projected), None)
                next_try = 2 * h
            step = d
        below = x
    return Cost(peak, None)


def _linear(costs: Costs, h: int, d: list[int], x0: list[int]) -> bool:
    """Whether the per-depth map F grows by at most `d` per level from here on. F(X + y) <=
    F(X) + F_0(y), with F_0 the map without constants (F is a maximum of linear forms plus
    constants), so F_0(d) <= d gives X_{h+k+1} <= F(X_h + k*d) <= X_{h+1} + k*F_0(d)
    <= X_h + (k+1)*d by induction."""
    f0 = costs.level(h + 1, d, x0, slope=True)
    return all(a <= b for a, b in zip(f0, d, strict=True))


def _problem(costs: Costs, graph: Graph, root: int, h: int, bound: int) -> str:
    path, mode, unevaluated, h = costs.explain(root, h)
    where = json_path(path)
    schema = graph.walk.nodes.get(path)
    if not h and mode == VALIDATE and isinstance(schema, dict):
        weights = {k: keyword_weight(k, v) for k, v in schema.items() if k in graph.known}
        heaviest = max(weights, key=weights.__getitem__, default=None)
        if heaviest is not None and weights[heaviest] > bound:
            return (
                f"{where}: validating one value against this subschema costs more than the "
                f"bound of {bound:,} units of work: its {heaviest} alone costs "
                f"{weights[heaviest]:,} (one per entry); make it shorter"
            )
    nested = f" nested {h} levels deep" if h else ""
    why = (
        "the branches of anyOf, oneOf, allOf, if/then/else, dependentSchemas and $ref that "
        "apply to the same value add up, and multiply when nested"
    )
    unevaluated = unevaluated or (
        isinstance(schema, dict)
        and ("unevaluatedProperties" in schema or "unevaluatedItems" in schema)
    )
    if unevaluated or mode != VALIDATE:
        why += "; unevaluatedProperties/unevaluatedItems evaluate every branch again"
    if h:
        why += "; branches that recurse into the same member multiply at every level"
    return (
        f"{where}: validating one value{nested} against this subschema"
        f"{_MODE_NOTE[mode]} may cost more than the bound of {bound:,} units of work ({why}); "
        "use fewer or mutually exclusive branches (distinct required property names, or "
        "if/then on a discriminator), share one subschema instead of repeating it in "
        "branches, or drop unevaluated* over branching subschemas"
    )


__all__ = ["MAP_CAP", "MAX_INSTANCE_DEPTH", "MAX_SCHEMA_COST", "Cost", "cost"]
