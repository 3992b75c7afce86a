"""The page's pictures, as geometry the templates draw as inline SVG (every label escaped there): a job name's
savepoints on a time line, and its versions as a graph. Pure functions of what the catalog and the registry hold.

A picture is drawn at its own size in pixels, never scaled to the window: on a phone it scrolls inside its own box
and its labels stay readable. Marks are kept apart and clear of the labels; a label too long for its place is cut,
its whole text in the title beside it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from sparkpoint.results import literal
from sparkpoint.times import parse_iso

WIDTH = 1000  # px: the least width of a picture; a crowded one is wider
LANE = 34  # px per lane
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP = 150, 20, 24
LABEL_GAP = 10  # px between a lane's label and its line
BIGGEST = 12  # px: the radius of the largest savepoint (3 + 9 at the largest size)
APART = 3  # px between two marks of a lane
# Labels are cut by their count of characters, at 11 px about 7 px each (DejaVu Sans' digits; most letters are
# narrower): a lane's left of its line, a version's under half a column either side of its node.
LANE_CHARS = (MARGIN_LEFT - LABEL_GAP) // 7 - 1
COLUMN = 200  # px: the least distance between two generations of versions
NODE_CHARS = 18
SIDE = 100  # px left of the first generation and right of the last


@dataclass
class Mark:
    x: float
    y: float
    r: float
    href: str
    title: str
    css: str  # status-<complete|incomplete|invalid> kind-<origin kind>


@dataclass
class Picture:
    height: float
    width: float = WIDTH
    # {y, label, title}; a lane's line from x1 to x2 with its label ending at label_x; a version's node at x, y
    lanes: list[dict[str, Any]] = field(default_factory=list)
    ticks: list[dict[str, Any]] = field(default_factory=list)  # {x, label}
    marks: list[Mark] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)  # {x1, y1, x2, y2, title}


def timeline(taken: list[Any], failures: list[Any] = ()) -> Picture:
    """One job name's savepoints (jobs.timeline's Taken: a catalog entry, how it was taken, whether it restores,
    whether retention would remove it) and failed savepoints: x is when each was taken, one lane per job that
    took it (its origin), the radius grows with the square root of its size. Marks closer than their radii are
    moved right along their lane, in the order they were taken, until they are apart."""
    how = {t.entry.path: t for t in taken}
    dated = [t.entry for t in taken if t.entry.created is not None]
    failed = [(f, parse_iso(f.at)) for f in failures if parse_iso(f.at) is not None]
    if not dated and not failed:
        return Picture(height=LANE)
    moments = [e.created for e in dated] + [at for _, at in failed]
    first_at = {}
    for lane, at in [(_lane_of(e), e.created) for e in dated] + [(f.job, at) for f, at in failed]:
        first_at[lane] = min(first_at.get(lane, at), at)
    lanes = sorted(first_at, key=first_at.get)
    first, last = min(moments), max(moments)
    span = max(last - first, 1.0)
    biggest = max((e.bytes or 0 for e in dated), default=0) or 1
    left, right = MARGIN_LEFT + BIGGEST + APART, WIDTH - MARGIN_RIGHT - BIGGEST  # no mark on a label

    def x_of(moment: float) -> float:
        return left + (right - left) * (moment - first) / span

    def y_of(lane: str) -> float:
        return MARGIN_TOP + LANE * lanes.index(lane) + LANE / 2

    picture = Picture(height=MARGIN_TOP + LANE * len(lanes) + 8)
    picture.lanes = [{"y": y_of(lane), "label": _cut(lane, LANE_CHARS), "title": lane} for lane in lanes]
    picture.ticks = [{"x": x_of(first + span * i / 4), "label": _clock(first + span * i / 4),
                      "anchor": "end" if i == 4 else "middle"} for i in range(5)]  # the last inside the picture
    for entry in dated:
        said = how[entry.path]
        cuts = ", ".join(f"{q.get('name')}@{q.get('batch_id')}" for q in entry.queries)
        notes = [said.kind, entry.status, cuts or "no query"]
        notes += [f"its Kafka input: {said.restorable}"] if said.restorable else []
        notes += ["retention would remove it"] if said.pruned else []
        css = [f"status-{entry.status}", f"kind-{said.kind}"]
        css += ["unrestorable"] if said.restorable == "unrestorable" else []
        css += ["pruned"] if said.pruned else []
        picture.marks.append(Mark(
            x=x_of(entry.created), y=y_of(_lane_of(entry)),
            r=3 + (BIGGEST - 3) * math.sqrt((entry.bytes or 0) / biggest),
            href=f"/savepoints/{quote(entry.id, safe='')}",
            title=f"{entry.id}: {entry.created_at}, " + ", ".join(notes), css=" ".join(css)))
    for failure, at in failed:
        picture.marks.append(Mark(x=x_of(at), y=y_of(failure.job), r=5, href=f"/#job-{failure.job}",
                                  title=f"a savepoint of {failure.job} failed at {failure.at}: "
                                  f"{failure.error or 'no error recorded'}", css="failed"))
    _apart(picture.marks)
    picture.width = max(WIDTH, max(mark.x + mark.r for mark in picture.marks) + MARGIN_RIGHT)
    for lane in picture.lanes:
        lane.update(x1=MARGIN_LEFT, x2=picture.width - MARGIN_RIGHT, label_x=MARGIN_LEFT - LABEL_GAP)
    return picture


def _apart(marks: list[Mark]) -> None:
    """Each mark moved right of the one before it in its lane (by x, then as listed), if they would touch."""
    before: dict[float, Mark] = {}
    for mark in sorted(marks, key=lambda m: m.x):  # sorted() is stable: marks of one moment stay as listed
        previous = before.get(mark.y)
        if previous is not None:
            mark.x = max(mark.x, previous.x + previous.r + mark.r + APART)
        before[mark.y] = mark


def _lane_of(entry: Any) -> str:
    origin = entry.origin or {}
    return origin.get("job_id") or origin.get("kind") or "unknown"


def versions(jobs: list[Any]) -> Picture:
    """A job name's versions (listed jobs) as a graph: one column per generation (a job and the one it
    follows), an edge from each to the version it continues, titled with the savepoint it restored from."""
    by_id = {job.id: job for job in jobs if job.id}
    depth: dict[str, int] = {}

    def generation(job_id: str) -> int:
        """Walked up, not recursed: a line of a thousand replaces is a thousand deep."""
        chain, current = [], job_id
        while current in by_id and current not in depth and current not in chain:  # a loop (an edited record) ends
            chain.append(current)
            current = by_id[current].follows
        base = depth.get(current, -1)
        for node in reversed(chain):
            base += 1
            depth[node] = base
        return depth[job_id]

    ordered = sorted(by_id, key=lambda job_id: (generation(job_id), by_id[job_id].created_at or ""))
    columns = max(depth.values(), default=0) + 1
    rows: dict[int, int] = {}
    place: dict[str, tuple[float, float]] = {}
    step = max(COLUMN, (WIDTH - 2 * SIDE) / max(columns - 1, 1))
    for job_id in ordered:
        column = depth[job_id]
        row = rows.get(column, 0)
        rows[column] = row + 1
        place[job_id] = (SIDE + step * column, MARGIN_TOP + LANE * row + LANE / 2)
    picture = Picture(height=MARGIN_TOP + LANE * max(rows.values(), default=1) + 8,
                      width=max(WIDTH, 2 * SIDE + step * (columns - 1)))
    for job_id in ordered:
        job = by_id[job_id]
        x, y = place[job_id]
        picture.marks.append(Mark(x=x, y=y, r=7, href=f"/#job-{job_id}", title=f"{job_id}: {job.state}",
                                  css=f"state-{job.state}"))
        picture.lanes.append({"x": x, "y": y, "label": _cut(job_id, NODE_CHARS), "title": job_id})
        if job.follows in place:
            x0, y0 = place[job.follows]
            restored = (job.restored_from or "").rstrip("/").rsplit("/", 1)[-1]
            how = job.lineage[-1].how if job.lineage else None
            picture.edges.append({"x1": x0, "y1": y0, "x2": x, "y2": y, "how": how or "restore",
                                  "title": f"{job.follows} → {job_id}" + (f" ({how})" if how else "")
                                  + (f" from {restored}" if restored else "")})
    return picture


def _cut(label: str, chars: int) -> str:
    """``label`` as the page shows it (controls escaped) in ``chars`` characters, its middle cut: a job id's end
    is what tells two versions of one name apart."""
    shown = literal(label)
    if len(shown) <= chars:
        return shown
    tail = (chars - 1) // 2
    return shown[:chars - 1 - tail] + "…" + shown[-tail:]


def _clock(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(moment))
