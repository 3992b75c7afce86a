"""The retention horizon: per source, the oldest input that a savepoint kept or a running job still needs.

The *holders* are the complete savepoints the retention policy keeps (all of them without a policy; with
``keep_last``/``max_age``, those ``prune`` would keep) and the checkpoints of the jobs running now. Each may
resume at its cut, and then reads its sources from the offsets of that cut: a query's ``offsets`` in the
manifest, ``offsets/<cut>`` in a live checkpoint (a batch planned after the cut reads from there too). Per
source, the horizon is the oldest position any holder still needs, and the holder that pins it. Input older
than the horizon can be retired (Kafka retention, old input files archived) without breaking any restore.

Who holds input is ``savepoints.holders``'s; what each kind of source needs, ``savepoints.source_horizons``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sparkpoint.adapters.kafka_log import BROKER_SECONDS
from sparkpoint.results import WHEN_SET, Result
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints.holders import Holder, Loaded, Need, load
from sparkpoint.savepoints.source_horizons import (
    CountingHorizon,
    DeltaHorizon,
    HeldOffset,
    OtherHorizon,
    SourceHorizon,
    file_horizon,
    kafka_horizon,
    kafka_times,
)
from sparkpoint.spark.sources import DELTA, FILE, KAFKA, RATE, RATE_MICRO_BATCH


@dataclass(frozen=True)
class Horizon(Result):
    directory: str
    job: str | None
    holders: list[Holder]
    sources: list[SourceHorizon]
    warnings: list[str]  # what was not counted, or is already wrong, one line each


@dataclass(frozen=True)
class HorizonShift(Result):
    before: Horizon
    after: Horizon


@dataclass(frozen=True)
class PrunePreview(catalog.Pruned):
    """``prune --dry-run``: what it would delete, and how the horizon would move."""

    horizon: HorizonShift | None = field(default=None, metadata=WHEN_SET)


def _distinct(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _assemble(directory: str, job: str | None, loaded: list[Loaded], storage_options: dict | None,
              warnings: list[str], kafka: Mapping[str, Any] | None = None,
              kafka_seconds: float = BROKER_SECONDS) -> Horizon:
    order = {item.holder.id: rank for rank, item in enumerate(loaded)}
    needs = [need for item in loaded for need in item.needs]  # oldest holder first
    times = kafka_times(needs, order, kafka, kafka_seconds, warnings)
    # File sources: a directory nested in another one's is that source (partitioned input, read in part).
    directories = sorted({n.key for n in needs if n.kind == FILE}, key=len)

    def source_of(need: Need) -> str:
        if need.kind != FILE:
            return need.key
        return next(d for d in directories if need.key == d or need.key.startswith(d.rstrip("/") + "/"))

    groups: dict[tuple[str, str], list[Need]] = {}
    for need in needs:
        groups.setdefault((need.kind, source_of(need)), []).append(need)
    sources: list[SourceHorizon] = []
    for (kind, key), group in sorted(groups.items()):
        common = {"kind": kind, "source": key, "queries": sorted({n.query for n in group}),
                  "holders": _distinct(n.holder for n in group)}
        if kind == FILE:
            sources.append(file_horizon(common, group, storage_options, warnings))
        elif kind == KAFKA:
            sources.append(kafka_horizon(common, group, order, times))
        elif kind == DELTA:
            # At one version, a snapshot read needs more than reading on from its commits: it holds older files.
            version, reads_commits, _, holder = min((n.value[0], not n.value[1], order[n.holder], n.holder)
                                                    for n in group)
            sources.append(DeltaHorizon(**common, version=version, snapshot=not reads_commits, held_by=holder))
        elif kind in (RATE, RATE_MICRO_BATCH):
            offset, _, holder, timestamp_ms = min((n.value, order[n.holder], n.holder, n.timestamp_ms)
                                                  for n in group)
            sources.append(CountingHorizon(**common, offset=offset, held_by=holder, timestamp_ms=timestamp_ms))
        else:
            sources.append(OtherHorizon(**common, offsets=[HeldOffset(n.holder, n.query, n.value) for n in group]))
    return Horizon(directory=directory, job=job, holders=[item.holder for item in loaded], sources=sources,
                   warnings=warnings)


def of(directory: str, entries: list[catalog.Entry], *, job: str | None = None, jobs: Iterable[Any] = (),
       storage_options: dict | None = None, kafka: Mapping[str, Any] | None = None,
       kafka_seconds: float = BROKER_SECONDS) -> Horizon:
    """The horizon of the savepoints ``entries`` (only complete ones count) and of the running ``jobs``
    (``JobView``s as ``list`` gives them: ``id``, ``name``, ``state``, ``checkpoint_root``, ``queries``). With
    ``kafka`` (the configuration's, {} for none), the brokers are asked when Kafka's oldest needed records were
    written, ``kafka_seconds`` at most."""
    warnings: list[str] = []
    saved, live = load(entries, job, jobs, storage_options, warnings)
    return _assemble(directory, job, saved + live, storage_options, warnings, kafka, kafka_seconds)


def horizon(directory: str, *, keep_last: int | None = None, max_age: float | None = None, job: str | None = None,
            jobs: Iterable[Any] = (), storage_options: dict | None = None, kafka: Mapping[str, Any] | None = None,
            clock: Callable[[], float] = time.time) -> Horizon:
    """The horizon of the catalog in ``directory``: the savepoints the retention policy keeps (every complete
    one without ``keep_last`` and ``max_age``; only ``job``'s with it) and ``job``'s (or every) running job."""
    entries = catalog.scan(directory, storage_options)
    if keep_last is None and max_age is None:
        kept = [e for e in entries if job is None or e.job == job]
    else:
        _delete, kept = catalog.prune_plan(entries, keep_last, max_age, job, clock())
    return of(directory, kept, job=job, jobs=jobs, storage_options=storage_options, kafka=kafka)


def preview(pruned: catalog.Pruned, *, job: str | None = None, jobs: Iterable[Any] = (),
            storage_options: dict | None = None, kafka: Mapping[str, Any] | None = None) -> PrunePreview:
    """A dry run of ``prune`` with the horizon now (its savepoints in scope, and the running jobs) and after
    it (without those it would delete); ``kafka`` as for ``of``."""
    warnings: list[str] = []
    saved, live = load([*pruned.deleted, *pruned.kept], job, jobs, storage_options, warnings)
    going = {e.id for e in pruned.deleted}
    before = _assemble(pruned.directory, job, saved + live, storage_options, list(warnings), kafka)
    kept = [item for item in saved if item.holder.id not in going]
    after = _assemble(pruned.directory, job, kept + live, storage_options, list(warnings), kafka)
    return PrunePreview(**{f.name: getattr(pruned, f.name) for f in fields(catalog.Pruned)},
                        horizon=HorizonShift(before=before, after=after))
