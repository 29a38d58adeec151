"""Metrics of the runs in worker children, counted in the control process's /metrics.

A child has its own `Metrics` (its own registry, never exposed). With every beat it sends the
increments of its counters and histograms since the previous beat (`Deltas.take`), and
control adds them to the same series of its own `Metrics` (`apply`): one exposition, one
series per label set, no per-process label and no prometheus multiprocess files. A child
that is killed loses at most the increments of its last beat interval (under a second).

Gauges are not forwarded: the gauges (running, pending, awaiting approval, cache, Job mode)
are kept by the control process, which schedules the runs."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

from ..telemetry.metrics import Metrics

LabelKey = tuple[tuple[str, str], ...]


def _key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


class Deltas:
    """Child side: the increments of `metrics`' counters and histograms since the last take."""

    def __init__(self, metrics: Metrics) -> None:
        self.registry = metrics.registry
        self._counters: dict[tuple[str, LabelKey], float] = {}
        self._histograms: dict[tuple[str, LabelKey], tuple[list[float], float]] = {}

    def take(self) -> dict[str, list[Any]]:
        """`{"counters": [[name, labels, increment]], "histograms": [[name, labels,
        [per-bucket increments], sum increment]]}`, JSON-ready; only what changed."""
        counters: list[Any] = []
        histograms: list[Any] = []
        for family in self.registry.collect():
            if family.type == "counter":
                for sample in family.samples:
                    if not sample.name.endswith("_total"):
                        continue
                    key = (family.name, _key(sample.labels))
                    increment = sample.value - self._counters.get(key, 0.0)
                    if increment:
                        self._counters[key] = sample.value
                        counters.append([family.name, sample.labels, increment])
            elif family.type == "histogram":
                cumulative: dict[LabelKey, list[float]] = {}
                sums: dict[LabelKey, float] = {}
                labels_of: dict[LabelKey, dict[str, str]] = {}
                for sample in family.samples:  # buckets in ascending order, then count, sum
                    labels = {k: v for k, v in sample.labels.items() if k != "le"}
                    key_l = _key(labels)
                    labels_of[key_l] = labels
                    if sample.name.endswith("_bucket"):
                        cumulative.setdefault(key_l, []).append(sample.value)
                    elif sample.name.endswith("_sum"):
                        sums[key_l] = sample.value
                for key_l, buckets in cumulative.items():
                    counts = [b - a for a, b in zip([0.0, *buckets[:-1]], buckets, strict=True)]
                    total = sums.get(key_l, 0.0)
                    key = (family.name, key_l)
                    before_counts, before_sum = self._histograms.get(
                        key, ([0.0] * len(counts), 0.0)
                    )
                    increments = [n - b for n, b in zip(counts, before_counts, strict=True)]
                    if any(increments):
                        self._histograms[key] = (counts, total)
                        histograms.append(
                            [family.name, labels_of[key_l], increments, total - before_sum]
                        )
        out: dict[str, list[Any]] = {}
        if counters:
            out["counters"] = counters
        if histograms:
            out["histograms"] = histograms
        return out


def _by_name(metrics: Metrics) -> dict[str, Counter | Histogram]:
    found: dict[str, Counter | Histogram] = {}
    for value in vars(metrics).values():
        if isinstance(value, Counter | Histogram):
            found[next(iter(value.describe())).name] = value
    return found


class Applier:
    """Control side: adds a child's `Deltas.take` to `metrics`."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._metrics = _by_name(metrics)

    def apply(self, deltas: dict[str, Any]) -> None:
        """Unknown names and malformed entries are skipped (a child of another version)."""
        for name, labels, increment in deltas.get("counters") or []:
            counter = self._metrics.get(name)
            if isinstance(counter, Counter) and increment > 0:
                try:
                    (counter.labels(**labels) if labels else counter).inc(increment)
                except ValueError:
                    continue
        for name, labels, increments, total in deltas.get("histograms") or []:
            histogram = self._metrics.get(name)
            if not isinstance(histogram, Histogram) or len(increments) != len(
                histogram._upper_bounds
            ):
                continue
            try:
                child = histogram.labels(**labels) if labels else histogram
            except ValueError:
                continue
            # prometheus_client has no public way to add bucket counts; these are the
            # histogram's own per-bucket values, as `observe` increments them.
            for bucket, n in zip(child._buckets, increments, strict=True):
                if n > 0:
                    bucket.inc(n)
            child._sum.inc(total)
