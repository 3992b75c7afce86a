"""Job views for renderer tests: only what a test is about, every other field none (as for an
application found through a driver UI)."""

from __future__ import annotations

from dataclasses import fields

from sparkpoint.jobs.listing import ListedJob
from sparkpoint.jobs.live import LiveQuery


def live_query(**given) -> LiveQuery:
    return LiveQuery.from_report(given)


def job_view(**given) -> ListedJob:
    unset = {f.name: None for f in fields(ListedJob)} | {"queries": [], "history": [], "lineage": [],
                                                         "source": "registry"}
    return ListedJob(**(unset | given))
