"""The dashboard's pages and its one POST endpoint for actions.

Every page is rendered on the server from at most a few store reads: the overview reads the
counters (``Store.stats``, O(topics)) and, at most every two seconds, the newest audit entries
for its charts; a topic page reads one page (``Store.jobs``); nothing reads a whole topic.
Actions are two steps: a GET of /confirm shows what will happen, its form POSTs to /act, which
checks read-only, the token and CSRF, acts, and redirects to a page that shows the result.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, QueryParams
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from actors import _validation as validation
from actors.cli.limits import describe as describe_limits
from actors.cli.output import CliError, parse_time_ms
from actors.dashboard import actions, security, views
from actors.dashboard.charts import bar_chart
from actors.dashboard.samples import Samples
from actors.errors import ValidationError
from actors.storage.listing import LISTED_STATES
from actors.storage.store import Store
from actors.values import TopicLimits

PAGE_SIZE = 50
DEAD_SHOWN = 500
FLASH_COOKIE = "redelay_flash"
STATES = [s.value for s in LISTED_STATES]


class Pages:
    """Handlers bound to one store. Starlette runs these sync handlers on its thread pool."""

    def __init__(
        self,
        store: Store,
        templates: Jinja2Templates,
        *,
        read_only: bool,
        token: str | None,
        csrf: security.Csrf,
    ) -> None:
        self.store = store
        self.templates = templates
        self.read_only = read_only
        self.token = token
        self.csrf = csrf
        self.samples = Samples(lambda count, after: store.recent_audit(count, after=after))

    # -- rendering ---------------------------------------------------------------------------

    def render(
        self, request: Request, name: str, context: Mapping[str, Any], status: int = 200
    ) -> Response:
        now_ms = self.store.clock.now_ms()
        root = request.scope.get("root_path", "")

        def href(path: str, **params: Any) -> str:
            query = {k: v for k, v in params.items() if v is not None and v != ""}
            encoded = urllib.parse.urlencode(query, doseq=True)
            return str(root) + path + (f"?{encoded}" if encoded else "")

        flash = request.cookies.get(FLASH_COOKIE)
        response = self.templates.TemplateResponse(
            request,
            name,
            {
                "namespace": self.store.namespace,
                "read_only": self.read_only,
                "actions_allowed": self.actions_allowed(request),
                "needs_login": self.token is not None and not self.read_only,
                "csrf": self.csrf.value(request),
                "flash": urllib.parse.unquote(flash) if flash else None,
                "now_ms": now_ms,
                "utc": views.utc,
                "rel": lambda ms: views.relative(ms, now_ms),
                "href": href,
                **context,
            },
            status_code=status,
        )
        self.csrf.keep(request, response)
        if flash:
            response.delete_cookie(FLASH_COOKIE, path="/")
        return response

    def problem(self, request: Request, status: int, message: str) -> Response:
        return self.render(request, "problem.html", {"message": message}, status)

    def actions_allowed(self, request: Request) -> bool:
        return not self.read_only and security.token_ok(request, self.token)

    # -- pages -------------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        now_ms = self.store.clock.now_ms()
        counts = self.store.stats(with_paused=True)
        risen = self.samples.record_dead(now_ms, counts)
        per_second, lateness = self.samples.charts(now_ms)
        totals = {s: sum(c.get(s, 0) for c in counts.values()) for s in STATES}
        return self.render(
            request,
            "overview.html",
            {
                "counts": counts,
                "risen": risen,
                "totals": totals,
                "states": STATES,
                "limits": self.store.all_limits(),
                "describe_limits": describe_limits,
                "rate_chart": bar_chart(per_second, title="jobs acked per second", unit="jobs/s"),
                "late_chart": bar_chart(lateness, title="worst delivery lateness", unit="s late"),
                "sampled": self.samples.sampled,
            },
        )

    def topic(self, request: Request) -> Response:
        q = request.query_params
        try:
            topic = validation.topic(q.get("name", ""))
            state = q.get("state", "delayed")
            prefix = q.get("prefix", "")
            page = self.store.jobs(topic, state, after=q.get("after") or None, limit=PAGE_SIZE)
        except ValidationError as exc:
            return self.problem(request, 400, str(exc))
        counts = self.store.stats(with_paused=True).get(topic, {})
        limits = self.store.limits(topic)
        jobs = [info for info in page.jobs if info.id.startswith(prefix)]
        return self.render(
            request,
            "topic.html",
            {
                "topic": topic,
                "state": state,
                "states": STATES,
                "counts": counts,
                "paused": bool(counts.get("paused")),
                "limited": describe_limits(limits) if limits != TopicLimits() else None,
                "prefix": prefix,
                "jobs": jobs,
                "next_after": page.next_after,
                "paged": bool(q.get("after")),
                "page_size": PAGE_SIZE,
            },
        )

    def job(self, request: Request) -> Response:
        q = request.query_params
        try:
            topic = validation.topic(q.get("topic", ""))
            job_id = validation.job_id(q.get("id", ""))
        except ValidationError as exc:
            return self.problem(request, 400, str(exc))
        info = self.store.get(topic, job_id)
        entries = self.store.job_entries(topic, job_id)  # the per-job index: O(its events)
        return self.render(
            request,
            "job.html",
            {
                "topic": topic,
                "job_id": job_id,
                "info": info,
                "body": None if info is None else views.pretty_body(info.body_bytes),
                "holder": views.lease_holder(entries),
                "timeline": views.timeline(entries),
            },
            200 if info is not None or entries else 404,
        )

    def dead(self, request: Request) -> Response:
        raw = request.query_params.get("topic") or None
        try:
            topic = None if raw is None else validation.topic(raw)
        except ValidationError as exc:
            return self.problem(request, 400, str(exc))
        infos = self.store.dead(topic, DEAD_SHOWN)
        counts = self.store.stats()
        dead_topics = sorted(t for t, c in counts.items() if c.get("dead", 0) > 0)
        return self.render(
            request,
            "dead.html",
            {
                "topic": topic,
                "groups": views.group_dead(infos),
                "shown": len(infos),
                "total": sum(c.get("dead", 0) for c in counts.values())
                if topic is None
                else counts.get(topic, {}).get("dead", 0),
                "dead_topics": dead_topics,
            },
        )

    def workers(self, request: Request) -> Response:
        return self.render(request, "workers.html", {"workers": self.store.workers()})

    def schedules(self, request: Request) -> Response:
        infos = self.store.schedules()
        return self.render(
            request,
            "schedules.html",
            {"schedules": [views.schedule_row(info) for info in infos]},
        )

    # -- actions -----------------------------------------------------------------------------

    def _parse(self, params: QueryParams | FormData) -> actions.Request:
        """The action a query string or form names; ValidationError naming the field."""
        jobs: list[tuple[str, str]] = []
        for value in params.getlist("job"):
            topic, sep, job_id = str(value).partition("|")
            if not sep:
                raise ValidationError("job", f"is {value!r}", "topic|id")
            jobs.append((validation.topic(topic), validation.job_id(job_id)))
        one_topic = params.get("topic")
        one_id = params.get("id")
        if isinstance(one_topic, str) and isinstance(one_id, str) and one_topic and one_id:
            jobs.append((validation.topic(one_topic), validation.job_id(one_id)))
        action = str(params.get("action", ""))
        if action in actions.TOPIC_ACTIONS:
            # A topic action names its topic alone: no job, so "topic" is not a job's topic.
            return actions.Request(action=action, topic=str(params.get("topic", "")))
        if action in actions.SCHEDULE_ACTIONS:
            return actions.Request(action=action, schedule=str(params.get("schedule", "")))
        all_of = params.get("all")
        due_ms = None
        due = params.get("due")
        if isinstance(due, str) and due.strip():
            try:
                due_ms = parse_time_ms(due.strip(), self.store.clock.now_ms(), "due")
            except CliError as exc:
                raise ValidationError("due", str(exc).removeprefix("due: ")) from None
        return actions.Request(
            action=action,
            jobs=tuple(jobs),
            all_of=validation.topic(all_of) if isinstance(all_of, str) and all_of else None,
            due_ms=due_ms,
        )

    def _refused(self, request: Request) -> Response | None:
        if self.read_only:
            return self.problem(request, 403, "This dashboard is read-only: actions are off.")
        if not security.token_ok(request, self.token):
            return self.problem(request, 403, "Actions need the dashboard's token: log in first.")
        return None

    def confirm(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            wanted = self._parse(request.query_params)
        except ValidationError as exc:
            return self.problem(request, 400, str(exc))
        return self.render(
            request,
            "confirm.html",
            {
                "wanted": wanted,
                "question": wanted.describe(),
                "members": [f"{t}|{i}" for t, i in wanted.jobs],
                "due": request.query_params.get("due", ""),
                # Computed, not the Referer: a header must not become a link on this page.
                "back": back_link(wanted, request.query_params),
                "from_page": views.return_page(request.query_params.get("from")),
            },
        )

    async def act(self, request: Request) -> Response:
        form = await request.form()
        if not self.csrf.ok(request, form.get(security.CSRF_FIELD)):
            return self.problem(request, 403, "The form expired or came from elsewhere (CSRF).")
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            wanted = self._parse(form)
            # The store is synchronous: run the action off the event loop.
            message = await run_in_threadpool(actions.perform, self.store, wanted)
        except ValidationError as exc:
            return self.problem(request, 400, str(exc))
        root = request.scope.get("root_path", "")
        if wanted.action in actions.DEAD_ACTIONS:
            target = root + "/dead"
        elif wanted.action in actions.SCHEDULE_ACTIONS:
            target = root + "/schedules"
        elif wanted.action in actions.TOPIC_ACTIONS:
            # Back to the page the action was started from: the overview or the topic.
            if views.return_page(form.get("from")) == "overview":
                target = root + "/"
            else:
                target = root + "/topic?" + urllib.parse.urlencode({"name": wanted.topic})
        else:
            topic, job_id = wanted.jobs[0]
            target = root + "/job?" + urllib.parse.urlencode({"topic": topic, "id": job_id})
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            FLASH_COOKIE, urllib.parse.quote(message), httponly=True, samesite="strict", path="/"
        )
        return response

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self.render(request, "login.html", {"wrong": False})
        form = await request.form()
        if not self.csrf.ok(request, form.get(security.CSRF_FIELD)):
            return self.problem(request, 403, "The form expired or came from elsewhere (CSRF).")
        given = form.get("token")
        if self.token is None or not isinstance(given, str):
            return self.problem(request, 400, "This dashboard has no token to log in with.")
        response = RedirectResponse(request.scope.get("root_path", "") + "/", status_code=303)
        response.set_cookie(
            security.TOKEN_COOKIE, given, httponly=True, samesite="strict", path="/"
        )
        if not security.token_ok_value(given, self.token):
            return self.render(request, "login.html", {"wrong": True}, 403)
        return response


def back_link(wanted: actions.Request, query: QueryParams) -> tuple[str, dict[str, str]]:
    """The confirmation page's "go back": the page the action was started from, as a path of
    this app and its query, told by the action itself."""
    if wanted.action in actions.TOPIC_ACTIONS:
        if views.return_page(query.get("from")) == "overview":
            return "/", {}
        return "/topic", {"name": str(wanted.topic)}
    if wanted.action in actions.SCHEDULE_ACTIONS:
        return "/schedules", {}
    if wanted.all_of is not None:
        return "/dead", {"topic": wanted.all_of}
    if wanted.action in actions.DEAD_ACTIONS and "id" not in query:
        return "/dead", {}  # a selection of the dead jobs page
    topic, job_id = wanted.jobs[0]
    return "/job", {"topic": topic, "id": job_id}
