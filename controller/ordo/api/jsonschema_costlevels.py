"""The per-depth iteration of the schema cost bound (`ordo.api.jsonschema_cost`): from the cost
graph, X[h][u] = the most work at one value h levels below a value that subschema u evaluates
once, tracked per member name or position (`_Slots`) and capped just past the bound; and, when
the bound is crossed, the walk back to the subschema where it is (`Costs.explain`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .jsonschema_costgraph import VALIDATE, Graph, Node
from .jsonschema_walk import Path

__all__ = ["MAP_CAP", "Costs"]

MAP_CAP = 64
"""Most property names (or array positions) one subschema's bound tracks one by one; past it
the subschema is costed as if every member met its most expensive name (an over-estimate)."""


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

    def __init__(self, node: Node, resolve: Callable[[int], int]) -> None:
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


class Costs:
    """The per-depth iteration: X[h][u] = most work at one value h levels below a value
    evaluated once by node u. Only the nodes the root reaches take part; from depth 2 on, a
    node that only passes its value on to one subschema (a bare `$ref`) is that subschema,
    and a `true` subschema (no work) is left out."""

    def __init__(self, graph: Graph, root: int, bound: int) -> None:
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
        seen_modes = self.nodes[u].mode != VALIDATE
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
            seen_modes = seen_modes or self.nodes[u].mode != VALIDATE
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
