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
  and third mode of every subschema (`_FIND_KEYS`, `_FIND_INDEXES`);
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
and the iteration stops at a fixed point (most schemas after a few depths).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .jsonschema_fuel import ARRAY_KEYWORDS, DESCEND, OBJECT_KEYWORDS, REF
from .jsonschema_keywords import keyword_weight, message_weight
from .jsonschema_walk import Path, Walk, json_path

MAX_SCHEMA_COST = 10_000
"""Most units of work the evaluation of one value may cost (see docs/security.md). A schema
whose bound is over it is refused, naming the subschema where the bound is crossed."""

MAX_INSTANCE_DEPTH = 64
"""How deep an instance nests (the parsers' cap, `ordo.engine.jsontext.MAX_JSON_DEPTH`)."""

MAP_CAP = 64
"""Most property names (or array positions) one subschema's bound tracks one by one; past it
the subschema is costed as if every member met its most expensive name (an over-estimate)."""

_VALIDATE, _FIND_KEYS, _FIND_INDEXES = range(3)
_MODE_NOTE = (
    "",
    " (as unevaluatedProperties re-evaluates it)",
    " (as unevaluatedItems re-evaluates it)",
)
_APPLICATOR_LISTS = ("allOf", "oneOf", "anyOf")


@dataclass
class _Node:
    """One subschema in one mode: what evaluating it on one value costs there, and where it
    sends that value (in place) and its members (by name, position or for all of them)."""

    path: Path
    mode: int
    local: int = 0
    in_place: dict[int, int] = field(default_factory=dict)
    props: dict[str, list[int]] = field(default_factory=dict)
    obj_all: list[int] = field(default_factory=list)
    obj_other: list[int] = field(default_factory=list)
    idx: dict[int, list[int]] = field(default_factory=dict)
    arr_all: list[int] = field(default_factory=list)
    arr_other: list[int] = field(default_factory=list)
    names: list[int] = field(default_factory=list)
    obj_loop: int = 0
    arr_loop: int = 0
    name_loop: int = 0
    sticky: int = 0

    @property
    def path_is_true(self) -> bool:
        return self.is_true

    is_true: bool = False
    """A `true` subschema: evaluating it costs nothing."""

    def add(self, target: int) -> None:
        self.in_place[target] = self.in_place.get(target, 0) + 1

    @property
    def consumes(self) -> bool:
        return bool(
            self.props
            or self.obj_all
            or self.obj_other
            or self.idx
            or self.arr_all
            or self.arr_other
            or self.names
            or self.obj_loop
            or self.arr_loop
            or self.name_loop
            or self.sticky
        )


class _Slots:
    """The work at a member h levels down, by the member's name or position (a member not
    named gets the default of its kind), and at a property name (h = 1)."""

    __slots__ = ("arr", "arr_default", "name", "obj", "obj_default", "peak")

    def __init__(
        self,
        obj: dict[str, int],
        obj_default: int,
        arr: dict[int, int],
        arr_default: int,
        name: int,
    ) -> None:
        self.obj = obj
        self.obj_default = obj_default
        self.arr = arr
        self.arr_default = arr_default
        self.name = name
        self.peak = 0

    def finish(self) -> None:
        """Drop named members that cost what an unnamed one does, collapse maps past
        `MAP_CAP` (an over-estimate), and compute `peak`."""
        if self.obj:
            self.obj, self.obj_default = _sparse(self.obj, self.obj_default)
        if self.arr:
            self.arr, self.arr_default = _sparse(self.arr, self.arr_default)
        peak = max(self.obj_default, self.arr_default, self.name)
        if self.obj:
            peak = max(peak, *self.obj.values())
        if self.arr:
            peak = max(peak, *self.arr.values())
        self.peak = peak

    def copy(self, m: int = 1) -> _Slots:
        out = _Slots(
            {k: m * v for k, v in self.obj.items()} if self.obj else {},
            m * self.obj_default,
            {k: m * v for k, v in self.arr.items()} if self.arr else {},
            m * self.arr_default,
            m * self.name,
        )
        out.peak = m * self.peak
        return out

    def add(self, other: _Slots, m: int) -> None:
        """self += m * other, pointwise (a name one side lacks costs that side's default)."""
        if self.obj or other.obj:
            self.obj = _plus(self.obj, self.obj_default, other.obj, other.obj_default, m)
        if self.arr or other.arr:
            self.arr = _plus(self.arr, self.arr_default, other.arr, other.arr_default, m)
        self.obj_default += m * other.obj_default
        self.arr_default += m * other.arr_default
        self.name += m * other.name

    def at(self, slot: tuple[str, Any]) -> int:
        kind, key = slot
        if kind == "o":
            return self.obj.get(key, self.obj_default) if key is not None else self.obj_default
        if kind == "a":
            return self.arr.get(key, self.arr_default) if key is not None else self.arr_default
        return self.name

    def argmax(self) -> tuple[str, Any]:
        candidates: list[tuple[int, tuple[str, Any]]] = [
            (self.obj_default, ("o", None)),
            (self.arr_default, ("a", None)),
            (self.name, ("n", None)),
        ]
        candidates += [(value, ("o", key)) for key, value in self.obj.items()]
        candidates += [(value, ("a", index)) for index, value in self.arr.items()]
        return max(candidates, key=lambda item: item[0])[1]


def _plus(
    mine: dict[Any, int], d_mine: int, theirs: dict[Any, int], d_theirs: int, m: int
) -> dict[Any, int]:
    """mine + m * theirs by name, a missing name costing its side's default."""
    return {
        k: mine.get(k, d_mine) + m * theirs.get(k, d_theirs) for k in mine.keys() | theirs.keys()
    }


def _sparse(named: dict[Any, int], default: int) -> tuple[dict[Any, int], int]:
    named = {k: v for k, v in named.items() if v != default}
    if len(named) > MAP_CAP:
        return {}, max(default, *named.values())
    return named, default


class _Graph:
    """The subschemas of one schema in their three modes, with their costs and edges."""

    def __init__(self, walk: Walk, known: frozenset[str], dialect: str) -> None:
        self.walk = walk
        self.known = known
        self.legacy_items = "2020-12" not in dialect
        self.legacy_uneval = "2019-09" in dialect
        self.unevaluated = "unevaluatedProperties" in known
        self.refs = ("$ref", "$recursiveRef" if self.legacy_uneval else "$dynamicRef")
        self.ids: dict[tuple[Path, int], int] = {}
        self.nodes: list[_Node] = []
        self.pending: list[int] = []
        for path in walk.nodes:
            self._id(path, _VALIDATE)
        for path, schema in walk.nodes.items():
            self._validate(self.nodes[self.ids[(path, _VALIDATE)]], schema)
        while self.pending:  # the unevaluated* modes, as the nodes above reach them
            node = self.nodes[self.pending.pop()]
            schema = walk.nodes[node.path]
            if node.mode == _FIND_KEYS:
                self._find_keys(node, schema)
            else:
                self._find_indexes(node, schema)

    def _id(self, path: Path, mode: int) -> int:
        key = (path, mode)
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.nodes)
            self.nodes.append(_Node(path, mode))
            if mode != _VALIDATE:
                self.pending.append(found)
        return found

    def v(self, path: Path) -> int:
        return self.ids[(path, _VALIDATE)]

    def _targets(self, path: Path, keyword: str) -> list[Path]:
        return self.walk.ref_targets.get((path, keyword), [])

    def _validate(self, node: _Node, schema: Any) -> None:
        path = node.path
        if schema is False:
            node.local = 1  # the $ordoFalse keyword
            return
        if schema is True:
            node.is_true = True
            return
        if not isinstance(schema, dict):
            return
        node.local = DESCEND  # evolve(): jsonschema starts evaluating a subschema object
        for keyword, value in schema.items():
            if keyword in self.known:
                node.local += keyword_weight(keyword, value) + message_weight(keyword, value)
                if keyword in ARRAY_KEYWORDS:
                    node.arr_loop += 1
                elif keyword in OBJECT_KEYWORDS or keyword == "additionalProperties":
                    node.obj_loop += 1
        for keyword in _APPLICATOR_LISTS:
            for i, _ in _subschemas(schema.get(keyword)):
                node.add(self.v((*path, keyword, i)))
        for keyword in ("not", "if", "then", "else"):
            if _is_schema(schema.get(keyword)):
                node.add(self.v((*path, keyword)))
        for keyword in ("dependentSchemas", "dependencies"):
            for name, _ in _named(schema.get(keyword)):
                node.add(self.v((*path, keyword, name)))
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            for target in self._targets(path, keyword):
                node.add(self.v(target))
        if self.unevaluated and "unevaluatedProperties" in schema:
            node.add(self._id(path, _FIND_KEYS))
            if isinstance(schema["unevaluatedProperties"], dict):
                node.obj_all.append(self.v((*path, "unevaluatedProperties")))
        if self.unevaluated and "unevaluatedItems" in schema:
            node.add(self._id(path, _FIND_INDEXES))
        self._members(node, schema)

    def _members(self, node: _Node, schema: dict[str, Any]) -> None:
        path = node.path
        for name, _ in _named(schema.get("properties")):
            node.props.setdefault(name, []).append(self.v((*path, "properties", name)))
        patterns = schema.get("patternProperties")
        for name, _ in _named(patterns):
            node.obj_all.append(self.v((*path, "patternProperties", name)))
        pattern_count = len(patterns) if isinstance(patterns, dict) else 0
        node.name_loop += pattern_count
        if "additionalProperties" in schema:
            node.name_loop += pattern_count
            if isinstance(schema["additionalProperties"], dict):
                node.obj_other.append(self.v((*path, "additionalProperties")))
        if _is_schema(schema.get("propertyNames")):
            node.names.append(self.v((*path, "propertyNames")))
        items = schema.get("items")
        if self.legacy_items and isinstance(items, list):
            for i, _ in _subschemas(items):
                node.idx.setdefault(i, []).append(self.v((*path, "items", i)))
            if _is_schema(schema.get("additionalItems")):
                node.arr_other.append(self.v((*path, "additionalItems")))
        elif _is_schema(items):
            (node.arr_all if self.legacy_items else node.arr_other).append(self.v((*path, "items")))
        if not self.legacy_items:
            for i, _ in _subschemas(schema.get("prefixItems")):
                node.idx.setdefault(i, []).append(self.v((*path, "prefixItems", i)))
        if _is_schema(schema.get("contains")):
            node.arr_all.append(self.v((*path, "contains")))
        if schema.get("uniqueItems") is True:
            node.sticky += 1

    def _refs_in_mode(self, node: _Node, mode: int) -> None:
        for keyword in self.refs:
            targets = self._targets(node.path, keyword)
            if targets:
                node.local += REF
            for target in targets:
                node.add(self._id(target, mode))

    def _branches(self, node: _Node, schema: dict[str, Any], mode: int) -> None:
        path = node.path
        for keyword in _APPLICATOR_LISTS:
            for i, _ in _subschemas(schema.get(keyword)):
                node.add(self.v((*path, keyword, i)))
                node.add(self._id((*path, keyword, i), mode))
        if _is_schema(schema.get("if")):
            node.add(self.v((*path, "if")))
            for keyword in ("if", "then", "else"):
                if _is_schema(schema.get(keyword)):
                    node.add(self._id((*path, keyword), mode))

    def _find_keys(self, node: _Node, schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        node.local = 1 + DESCEND
        path = node.path
        self._refs_in_mode(node, _FIND_KEYS)
        if self.legacy_uneval:
            for keyword in ("properties", "additionalProperties", "unevaluatedProperties"):
                if isinstance(schema.get(keyword), dict):
                    node.local += len(schema[keyword])
        else:
            for keyword in ("additionalProperties", "unevaluatedProperties"):
                if keyword in schema:
                    node.obj_loop += 1
                    if isinstance(schema[keyword], dict):
                        node.obj_all.append(self.v((*path, keyword)))
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict):
            node.name_loop += len(patterns)
        for name, _ in _named(schema.get("dependentSchemas")):
            node.add(self._id((*path, "dependentSchemas", name), _FIND_KEYS))
        self._branches(node, schema, _FIND_KEYS)

    def _find_indexes(self, node: _Node, schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        node.local = 1 + DESCEND
        path = node.path
        if not self.legacy_uneval and "items" in schema:
            return
        self._refs_in_mode(node, _FIND_INDEXES)
        if (
            self.legacy_uneval
            and "items" in schema
            and ("additionalItems" in schema or isinstance(schema["items"], dict))
        ):
            return
        for keyword in ("contains", "unevaluatedItems"):
            if keyword in schema:
                node.arr_loop += 1
                if isinstance(schema[keyword], dict):
                    node.arr_all.append(self.v((*path, keyword)))
        self._branches(node, schema, _FIND_INDEXES)

    def order(self, root: int) -> list[int]:
        """The nodes `root` reaches (in place or through members), each after the nodes it
        evaluates in place (the in-place graph is acyclic: `Walk` refused the schema
        otherwise); without recursion."""
        reach = {root}
        todo = [root]
        while todo:
            for v in _edges(self.nodes[todo.pop()]):
                if v not in reach:
                    reach.add(v)
                    todo.append(v)
        done: set[int] = set()
        out: list[int] = []
        for start in sorted(reach):
            if start in done:
                continue
            stack: list[tuple[int, bool]] = [(start, False)]
            while stack:
                u, expanded = stack.pop()
                if expanded:
                    if u not in done:
                        done.add(u)
                        out.append(u)
                    continue
                if u in done:
                    continue
                stack.append((u, True))
                stack.extend((v, False) for v in self.nodes[u].in_place if v not in done)
        return out


def _edges(node: _Node) -> Iterator[int]:
    yield from node.in_place
    for targets in (*node.props.values(), *node.idx.values()):
        yield from targets
    yield from node.obj_all
    yield from node.obj_other
    yield from node.arr_all
    yield from node.arr_other
    yield from node.names


def _is_schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _subschemas(value: Any) -> Iterable[tuple[int, Any]]:
    if isinstance(value, list):
        return ((i, v) for i, v in enumerate(value) if _is_schema(v))
    return ()


def _named(value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        return ((k, v) for k, v in value.items() if _is_schema(v))
    return ()


class _View:
    """A node's member edges as the per-depth loop reads them, targets resolved."""

    __slots__ = (
        "arr_all",
        "arr_loop",
        "arr_other",
        "idx",
        "name_loop",
        "names",
        "obj_all",
        "obj_loop",
        "obj_other",
        "props",
        "sticky",
    )

    def __init__(self, node: _Node, resolve: Callable[[int], int]) -> None:
        def targets(items: list[int]) -> list[int]:
            return [resolve(c) for c in items if resolve(c) >= 0]

        self.props = [(name, targets(t)) for name, t in node.props.items()]
        self.idx = [(i, targets(t)) for i, t in node.idx.items()]
        self.obj_all = targets(node.obj_all)
        self.obj_other = targets(node.obj_other)
        self.arr_all = targets(node.arr_all)
        self.arr_other = targets(node.arr_other)
        self.names = list(node.names)  # read at depth 1, from X_0: never resolved
        self.obj_loop, self.arr_loop = node.obj_loop, node.arr_loop
        self.name_loop, self.sticky = node.name_loop, node.sticky


class _Costs:
    """The per-depth iteration: X[h][u] = most work at one value h levels below a value
    evaluated once by node u. Only the nodes the root reaches take part; from depth 2 on, a
    node that only passes its value on to one subschema (a bare `$ref`) is that subschema,
    and a `true` subschema (no work) is left out."""

    def __init__(self, graph: _Graph, root: int, bound: int) -> None:
        self.nodes = graph.nodes
        self.cap = bound + 1
        self.slots: list[_Slots | None] = []
        self.history: list[tuple[list[int], list[_Slots | None]]] = []
        """(X_h, slots) of every depth computed so far, for `explain`."""
        order = graph.order(root)
        self.alias: dict[int, int] = {}
        for u in order:  # children first, so a chain resolves in one pass
            node = self.nodes[u]
            if not node.consumes and len(node.in_place) == 1:
                ((v, m),) = node.in_place.items()
                if m == 1:
                    self.alias[u] = self.alias.get(v, v)
        free = {u for u in order if self.nodes[u].path_is_true}

        def same(c: int) -> int:
            return -1 if c in free else c

        def resolve(c: int) -> int:
            return -1 if c in free else self.alias.get(c, c)

        self.first = self._plan(order, same, set())
        self.later = self._plan(order, resolve, set(self.alias))
        self.resolve = resolve

    def _plan(
        self, order: list[int], resolve: Callable[[int], int], skip: set[int]
    ) -> list[tuple[int, _View | None, list[tuple[int, int]]]]:
        plan = []
        for u in order:
            if u in skip:
                continue
            node = self.nodes[u]
            view = _View(node, resolve) if node.consumes else None
            in_place = [(resolve(v), m) for v, m in node.in_place.items() if resolve(v) >= 0]
            plan.append((u, view, in_place))
        return plan

    def level0(self) -> list[int]:
        x = [0] * len(self.nodes)
        cap = self.cap
        for u, _, in_place in self.first:
            total = self.nodes[u].local
            for v, m in in_place:
                total += m * x[v]
            x[u] = min(total, cap)
        return x

    def level(self, h: int, below: list[int], x0: list[int], *, slope: bool = False) -> list[int]:
        """X_h from X_{h-1} (`below`); keeps the slots of this level for `explain`. With
        `slope`, the same map without its constants and cap (F_0, see `cost`)."""
        cap = self.cap if not slope else 2**62
        slots: list[_Slots | None] = [None] * len(self.nodes)
        x = [0] * len(self.nodes)
        first = h == 1
        for u, view, in_place in self.first if first else self.later:
            merged = _own(view, below, x0, first, slope) if view is not None else None
            owned = merged is not None
            for v, m in in_place:
                child = slots[v]
                if child is None:
                    continue
                if merged is None:
                    if m == 1:
                        merged = child  # shared until a second contribution (copy on write)
                        continue
                    merged, owned = child.copy(m), True
                elif not owned:
                    merged, owned = merged.copy(), True
                    merged.add(child, m)
                else:
                    merged.add(child, m)
            if merged is not None:
                if owned:
                    merged.finish()
                x[u] = min(merged.peak, cap)
            slots[u] = merged
        if not first:
            for u, v in self.alias.items():
                x[u], slots[u] = x[v], slots[v]
        if not slope:
            self.slots = slots
            self.history.append((x, slots))
        return x

    def explain(self, root: int, h: int) -> tuple[Path, int, bool, int]:
        """Where the bound is crossed: from the root, follow the in-place subschema over the
        bound, or the member's subschema over it one level down, until none is: the subschema
        whose branches add up past it. (path, mode, unevaluated* seen, depth left)."""
        bound = self.cap - 1
        u = root
        slot = self._argmax(u, h)
        seen_modes = self.nodes[u].mode != _VALIDATE
        while True:
            x, slots = self.history[h]
            best: tuple[int, int] | None = None
            for v, m in self.nodes[u].in_place.items():
                value = x[v] if not h else _at(slots[v], slot)
                if m * value > bound and (best is None or m * value > best[0]):
                    best = (m * value, v)
            if best is not None:
                u = best[1]
            elif h and slot is not None:
                member = self._member(u, slot, h)
                if member is None:
                    break
                u, h = member, h - 1
                slot = self._argmax(u, h)
            else:
                break
            seen_modes = seen_modes or self.nodes[u].mode != _VALIDATE
        node = self.nodes[u]
        return node.path, node.mode, seen_modes, h

    def _argmax(self, u: int, h: int) -> tuple[str, Any] | None:
        if not h:
            return None
        slots = self.history[h][1][u]
        return slots.argmax() if slots is not None else None

    def _member(self, u: int, slot: tuple[str, Any], h: int) -> int | None:
        """The subschema u applies to the member `slot` that alone costs past the bound one
        level down, if any."""
        node = self.nodes[u]
        kind, key = slot
        if kind == "o":
            targets = [*node.props.get(key, node.obj_other), *node.obj_all]
        elif kind == "a":
            targets = [*node.idx.get(key, node.arr_other), *node.arr_all]
        else:
            targets, h = list(node.names), 1
        below = self.history[h - 1][0]
        over = [(below[c], c) for c in targets if below[c] > self.cap - 1]
        return max(over)[1] if over else None


def _at(slots: _Slots | None, slot: tuple[str, Any] | None) -> int:
    if slots is None or slot is None:
        return 0
    return slots.at(slot)


def _own(
    view: _View, below: list[int], x0: list[int], first: bool, slope: bool = False
) -> _Slots | None:
    """What a node sends to its members itself (not through in-place subschemas)."""

    def total(targets: list[int]) -> int:
        return sum([below[c] for c in targets]) if targets else 0

    sticky = view.sticky if not slope else 0
    obj_common = total(view.obj_all) + sticky + (view.obj_loop if first else 0)
    arr_common = total(view.arr_all) + sticky + (view.arr_loop if first else 0)
    obj = {name: total(t) + obj_common for name, t in view.props}
    arr = {i: total(t) + arr_common for i, t in view.idx}
    name = sum([x0[c] for c in view.names]) + view.name_loop if first else 0
    slots = _Slots(
        obj, total(view.obj_other) + obj_common, arr, total(view.arr_other) + arr_common, name
    )
    slots.finish()
    return slots if slots.peak else None


@dataclass(frozen=True)
class Cost:
    units: int
    """The bound: most units of work one value of an instance may cost (capped just past
    `bound` when the schema is refused)."""
    problem: str | None


def cost(walk: Walk, known: frozenset[str], dialect: str, bound: int = MAX_SCHEMA_COST) -> Cost:
    """The bound of a schema `walk` checked (no other problems), for the keywords `known` to
    its draft's validator class."""
    graph = _Graph(walk, known, dialect)
    root = graph.v(())
    costs = _Costs(graph, root, bound)
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


def _linear(costs: _Costs, h: int, d: list[int], x0: list[int]) -> bool:
    """Whether the per-depth map F grows by at most `d` per level from here on. F(X + y) <=
    F(X) + F_0(y), with F_0 the map without constants (F is a maximum of linear forms plus
    constants), so F_0(d) <= d gives X_{h+k+1} <= F(X_h + k*d) <= X_{h+1} + k*F_0(d)
    <= X_h + (k+1)*d by induction."""
    f0 = costs.level(h + 1, d, x0, slope=True)
    return all(a <= b for a, b in zip(f0, d, strict=True))


def _problem(costs: _Costs, graph: _Graph, root: int, h: int, bound: int) -> str:
    path, mode, unevaluated, h = costs.explain(root, h)
    where = json_path(path)
    schema = graph.walk.nodes.get(path)
    if not h and mode == _VALIDATE and isinstance(schema, dict):
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
    if unevaluated or mode != _VALIDATE:
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
