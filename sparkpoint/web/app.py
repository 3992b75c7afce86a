"""The operator's page: jobs, the savepoint catalog, a savepoint's contents and the diff of two, each route one call
to the library functions the CLI uses (jobs.listing, savepoints.catalog, savepoints.inspect, savepoints.diff)
rendered by a Jinja2 template. Templates escape every value (autoescape, no ``|safe``), its control and bidi
characters first written as their escapes as the CLI writes them (``results.literal``), and the pages load no
script, style or font from elsewhere: they work on a host with no internet, under a CSP of 'self'."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sparkpoint.adapters.class_archives import local_class_archive
from sparkpoint.config import Settings
from sparkpoint.errors import NotFoundError, SparkpointError
from sparkpoint.jobs import startup, timeline
from sparkpoint.results import as_json, human_bytes, literal
from sparkpoint.times import parse_iso
from sparkpoint.web import actions, draw
from sparkpoint.web.auth import TokenGate

HERE = Path(__file__).parent
PAGE_ROWS = 50  # state rows per store and page


def make_app(settings: Settings, token: str, cookie: str, refresh_seconds: float = 5.0,
             allow_actions: bool = False) -> TokenGate:
    """The page for ``settings``' home, behind ``token``; ``allow_actions``: savepoint, stop and dispose from it."""
    templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined,
                            finalize=_shown)
    templates.filters.update(bytes=human_bytes, age=_age, rate=_rate, phases=startup.said)
    forms = actions.Forms(secrets.token_bytes(32))
    state_reads = threading.Lock()

    def page(template: str, status: int = 200, **values: Any) -> HTMLResponse:
        return HTMLResponse(templates.get_template(template).render(home=settings.home, refresh=refresh_seconds,
                                                                    actions=allow_actions, **values),
                            status_code=status)

    def confirm_page(request: Request) -> Response:
        action, target = request.query_params.get("action", ""), request.query_params.get("target", "")
        if not allow_actions:
            return page("problem.html", status=403, problem=actions.NOT_ALLOWED)
        if action not in actions.ACTIONS or not target:
            return page("problem.html", status=400, problem=f"no such action: {action!r} on {target!r}")
        return page("confirm.html", action=action, target=target, said=actions.ACTIONS[action],
                    seal=forms.seal(action, target))

    async def action_page(request: Request) -> Response:
        action = request.path_params["action"]
        if not allow_actions:
            return page("problem.html", status=403, problem=actions.NOT_ALLOWED)
        refused = actions.refused(request.headers, str(request.base_url))
        if refused:
            return page("problem.html", status=403, problem=refused)
        fields = actions.form(await _body(request, actions.FORM_LIMIT)) or {}
        target = fields.get("target", "")
        if action not in actions.ACTIONS or not forms.opens(fields.get("seal", ""), action, target):
            return page("problem.html", status=403, problem="this form was not made by this page: nothing was done")
        try:
            done = await run_in_threadpool(actions.perform, settings, action, target)
        except SparkpointError as exc:
            return page("problem.html", status=409,
                        problem=f"{action} of {target} failed (exit {exc.exit_code}): {exc}")
        return page("done.html", action=action, target=target, lines=done.said())

    def jobs_page(_request: Request) -> Response:
        return page("jobs.html", jobs=_jobs(settings))

    def jobs_fragment(_request: Request) -> Response:
        return page("jobs_table.html", jobs=_jobs(settings))

    def jobs_json(_request: Request) -> Response:
        return JSONResponse(as_json(_jobs(settings)))

    def savepoints_page(_request: Request) -> Response:
        from sparkpoint.savepoints import catalog

        entries = catalog.scan(settings.savepoints_dir(), settings.storage_options)
        by_job: dict[str, list] = {}
        for entry in entries:
            by_job.setdefault(entry.job or "(no job)", []).append(entry)
        return page("savepoints.html", by_job=sorted(by_job.items()),
                    pictures={job: draw.timeline([timeline.Taken(entry=e, kind=timeline.kind_of(e, {}),
                                                                 restorable=None, pruned=False) for e in listed])
                              for job, listed in by_job.items()})

    def name_page(request: Request) -> Response:
        from sparkpoint.savepoints import catalog

        name = request.path_params["name"]
        try:
            keep_last = int(request.query_params["keep_last"]) if request.query_params.get("keep_last") else None
        except ValueError:
            return page("problem.html", status=400, problem="keep_last: give a number of savepoints to keep")
        max_age = request.query_params.get("max_age") or None  # as prune's --max-age takes it: 7d, 1d12h
        jobs = [job for job in _jobs(settings) if job.name == name]
        drawn = timeline.timeline(settings, name, keep_last=keep_last,
                                  max_age=catalog.parse_duration(max_age) if max_age else None)
        if not jobs and not drawn.savepoints and not drawn.failures:
            raise NotFoundError(f"no job and no savepoint of the name {name!r} in this home")
        return page("name.html", name=name, jobs=jobs, entries=[t.entry for t in drawn.savepoints], drawn=drawn,
                    keep_last=keep_last, max_age=max_age, lineage=draw.versions(jobs),
                    savepoints=draw.timeline(drawn.savepoints, drawn.failures))

    def savepoint_page(request: Request) -> Response:
        from sparkpoint.savepoints import catalog
        from sparkpoint.savepoints.inspect import inspect

        inspected = inspect(catalog.load(settings, request.path_params["ref"]), None, settings.kafka,
                            settings.storage_options)
        return page("savepoint.html", inspected=inspected, manifest=inspected.manifest,
                    queries=inspected.queries)

    def state_page(request: Request) -> Response:
        """The savepoint's state rows, read by a local Spark (started in this process on the first such request:
        the only page that needs one), PAGE_ROWS at a time."""
        from sparkpoint.savepoints import catalog
        from sparkpoint.savepoints.inspect import inspect

        try:
            number = max(0, int(request.query_params.get("page", "0")))
        except ValueError:
            number = 0
        with state_reads:  # one at a time: each restores the savepoint and counts every store
            inspected = inspect(catalog.load(settings, request.path_params["ref"]), PAGE_ROWS, settings.kafka,
                                settings.storage_options, state_offset=number * PAGE_ROWS, scratch=settings.scratch_dir,
                                class_archive=local_class_archive(settings.class_archives_dir()))
        more = any(store.rows > (number + 1) * PAGE_ROWS for store in inspected.state or [])
        return page("state.html", manifest=inspected.manifest, path=inspected.path, stores=inspected.state or [],
                    number=number,
                    rows_per_page=PAGE_ROWS, more=more)

    def verify_page(request: Request) -> Response:
        """Every file of the savepoint read and checked against its manifest (`sparkpoint verify`)."""
        from sparkpoint.savepoints import catalog
        from sparkpoint.savepoints.savepoint import verify

        report = verify(catalog.load(settings, request.path_params["ref"]), settings.transfer_workers)
        return page("verified.html", report=report, lines=report.said() or [f"Savepoint {report.id} failed "
                                                                          "verification"])

    def diff_page(request: Request) -> Response:
        from sparkpoint.savepoints import catalog
        from sparkpoint.savepoints.diff import diff

        before, after = request.query_params.get("before"), request.query_params.get("after")
        if not before or not after:
            return page("problem.html", status=400, problem="a diff needs two savepoints: ?before=ID&after=ID")
        compared = diff(catalog.load(settings, before), catalog.load(settings, after))
        return page("diff.html", compared=compared)

    def refused(_request: Request, exc: Exception) -> Response:
        """Any page's failure with sparkpoint's own error: its line, 404 for what does not exist, else 400."""
        return page("problem.html", status=404 if isinstance(exc, NotFoundError) else 400, problem=str(exc))

    app = Starlette(exception_handlers={SparkpointError: refused}, routes=[
        Route("/", jobs_page),
        Route("/fragments/jobs", jobs_fragment),
        Route("/api/jobs", jobs_json),
        Route("/savepoints", savepoints_page),
        Route("/names/{name}", name_page),
        Route("/savepoints/{ref:path}/state", state_page),
        Route("/savepoints/{ref:path}/verify", verify_page),
        Route("/savepoints/{ref:path}", savepoint_page),
        Route("/diff", diff_page),
        Route("/confirm", confirm_page),
        Route("/actions/{action}", action_page, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ])
    return TokenGate(app, token, cookie)


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, or what fits in ``limit`` + 1 bytes (a larger one is refused by its reader)."""
    if int(request.headers.get("content-length") or 0) > limit:
        return b"x" * (limit + 1)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            break
    return body


def _jobs(settings: Settings) -> list:
    from sparkpoint.jobs.listing import list_jobs

    return list_jobs(settings, include_all=True)


def _shown(value: Any) -> Any:
    """What a template prints of ``value``: as the CLI shows it (``literal``). Markup is HTML made here (a
    macro's output, ``|tojson``'s), whose values were shown so when it was made."""
    return value if isinstance(value, Markup) else literal(value)


def _age(iso_time: str | None) -> str:
    """How long ago: ``42 s``, ``7 min``, ``3 h``, ``2 d``."""
    moment = parse_iso(iso_time) if iso_time else None
    if moment is None:
        return "-"
    seconds = max(0.0, time.time() - moment)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}/s"
