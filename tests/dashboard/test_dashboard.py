"""The dashboard without a browser: its charts, grouping and action rules as plain functions,
and its guards (read-only, CSRF, token, escaping) over HTTP against a real Redis.

tests/dashboard/test_dashboard_browser.py clicks through the same pages in chromium."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis

pytest.importorskip("starlette", reason="the dashboard extra (pip install '.[dashboard]')")
from _dashboard import cookie_from, fetch, serve

from actors.clock import SystemClock
from actors.dashboard import actions, create_app, views
from actors.dashboard.charts import bar_chart, rates
from actors.dashboard.samples import Samples
from actors.errors import ValidationError
from actors.schedules import ScheduleSpec
from actors.storage.store import Store
from actors.values import JobInfo, TopicLimits

NS = "dash"


@pytest.fixture
def store(redis_client: redis.Redis) -> Store:
    return Store(redis_client, NS, SystemClock())


def make_dead(store: Store, topic: str, job_id: str, traceback: str = "") -> None:
    store.add(store.new_job(topic, job_id, {"n": 1}, retry_ms=[0]))
    for _ in range(2):
        (lease,) = store.lease(topic, 1)
        store.fail(topic, job_id, lease.token, "boom", 0, traceback=traceback)
    info = store.get(topic, job_id)
    assert info is not None and info.state == "dead"


# -- pure parts -------------------------------------------------------------------------------


def test_rates_count_acks_per_second_and_the_worst_lateness_per_bucket() -> None:
    now = 100_000
    entries = [
        ("1-0", {"e": "acked", "ms": "95000"}),
        ("2-0", {"e": "acked", "ms": "96000"}),
        ("3-0", {"e": "ready", "ms": "97000", "due": "94000"}),
        ("4-0", {"e": "ready", "ms": "97500", "due": "97000"}),
        ("5-0", {"e": "acked", "ms": "50000"}),  # outside the window: not counted
    ]
    per_second, late = rates(entries, now, window_ms=20_000, bucket_ms=10_000)
    assert per_second.values == (0.0, 0.2)
    assert late.values == (0.0, 3.0)
    assert per_second.start_ms == 80_000


def test_the_bar_chart_has_a_bar_per_bucket_and_labels_its_maximum() -> None:
    per_second, _ = rates([], 100_000, window_ms=30_000, bucket_ms=10_000)
    svg = bar_chart(per_second, title="a <title>", unit="jobs/s")
    assert svg.count("<rect") == 3
    assert "a &lt;title&gt;" in svg and "max 0 jobs/s" in svg


def test_dead_rising_compares_with_the_oldest_sample_of_the_window() -> None:
    samples = Samples(lambda count, after: [])
    assert samples.record_dead(0, {"mail": {"dead": 1}}) == {"mail": False}
    assert samples.record_dead(3_000, {"mail": {"dead": 1}}) == {"mail": False}
    assert samples.record_dead(6_000, {"mail": {"dead": 2}}) == {"mail": True}
    # Ten minutes later the old samples have left the window: steady again.
    assert samples.record_dead(700_000, {"mail": {"dead": 2}}) == {"mail": False}


def test_the_charts_read_only_entries_newer_than_the_last_refresh() -> None:
    asked: list[str | None] = []
    stream = [("1000-0", {"e": "acked", "ms": "1000"}), ("2000-0", {"e": "added", "ms": "2000"})]

    def recent(count: int, after: str | None) -> list[tuple[str, dict[str, str]]]:
        asked.append(after)
        return [e for e in stream if after is None or int(e[0][:-2]) > int(after[:-2])]

    samples = Samples(recent)
    samples.charts(10_000)
    samples.charts(11_000)  # within the cache: no read
    stream.append(("12000-0", {"e": "acked", "ms": "12000"}))
    per_second, _ = samples.charts(12_500)
    assert asked == [None, "2000-0"]
    assert sum(per_second.values) * 10 == 2  # both acks, each counted once


def info(job_id: str, traceback: str | None) -> JobInfo:
    return JobInfo("t", job_id, "dead", 0, 2, 2, b"null", 0, traceback=traceback)  # type: ignore[arg-type]


def test_dead_jobs_are_grouped_by_their_exception_line_largest_group_first() -> None:
    tb = "Traceback (most recent call last):\n  File x\nValueError: no stock\n"
    groups = views.group_dead([info("a", None), info("b", tb), info("c", tb)])
    assert [(g.reason, [j.id for j in g.jobs]) for g in groups] == [
        ("ValueError: no stock", ["b", "c"]),
        (views.NO_TRACEBACK, ["a"]),
    ]


def test_quarantined_jobs_are_grouped_by_how_often_their_worker_was_lost() -> None:
    tb = "Traceback (most recent call last):\n  File x\nValueError: no stock\n"
    lost = [replace(info(n, tb if n == "b" else None), quarantined=True, lost=3) for n in "ab"]
    groups = views.group_dead([*lost, info("c", tb)])
    assert [(g.reason, [j.id for j in g.jobs]) for g in groups] == [
        ("quarantined: its worker was lost 3 times while it ran alone", ["a", "b"]),
        ("ValueError: no stock", ["c"]),
    ]


def test_bodies_are_pretty_printed_and_kept_when_they_do_not_parse() -> None:
    assert views.pretty_body(b'{"b":1,"a":[1]}') == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}'
    assert views.pretty_body(b"not json") == "not json"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"action": "explode", "jobs": (("t", "a"),)}, "action"),
        ({"action": "cancel"}, "job"),
        ({"action": "cancel", "jobs": (("t", "a"), ("t", "b"))}, "job"),
        ({"action": "cancel", "all_of": "t"}, "all"),
        ({"action": "reschedule", "jobs": (("t", "a"),)}, "due"),
        ({"action": "pause"}, "topic"),
        ({"action": "resume", "topic": "a|b"}, "topic"),
        ({"action": "pause", "topic": "t", "jobs": (("t", "a"),)}, "job"),
        ({"action": "unschedule"}, "schedule"),
        ({"action": "unschedule", "schedule": "no spaces"}, "schedule"),
    ],
)
def test_a_bad_action_request_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        actions.Request(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_run_now_keeps_the_body_and_retry_schedule_and_refuses_a_dead_job(store: Store) -> None:
    store.add(store.new_job("later", "j1", {"k": "v"}, delay_ms=600_000, retry_ms=[1_000]))
    message = actions.perform(store, actions.Request("run_now", (("later", "j1"),)))
    assert message == "later/j1 is due now."
    moved = store.get("later", "j1")
    assert moved is not None and moved.due_ms <= store.clock.now_ms()
    assert (moved.body, moved.retry_ms) == ({"k": "v"}, (1_000,))
    make_dead(store, "graves", "d1")
    refused = actions.perform(store, actions.Request("run_now", (("graves", "d1"),)))
    assert refused == "graves/d1 is dead: only delayed or ready jobs move."
    dead = store.get("graves", "d1")
    assert dead is not None and dead.state == "dead"


# -- over HTTP --------------------------------------------------------------------------------


@pytest.fixture
def url(store: Store) -> Iterator[str]:
    with serve(create_app(store)) as base:
        yield base


def csrf_session(base: str) -> dict[str, str]:
    status, _, headers = fetch(base + "/")
    assert status == 200
    value = cookie_from(headers, "redelay_csrf")
    assert value
    return {"redelay_csrf": value}


def test_a_post_without_the_csrf_value_changes_nothing(store: Store, url: str) -> None:
    store.add(store.new_job("later", "j1", None, delay_ms=600_000))
    cookies = csrf_session(url)
    form = {"action": "cancel", "topic": "later", "id": "j1"}
    for data, jar in [(form, cookies), ({**form, "csrf": "forged"}, cookies), (form, {})]:
        status, body, _ = fetch(url + "/act", data=data, cookies=jar)
        assert status == 403 and "CSRF" in body
    assert store.get("later", "j1") is not None
    status, _, headers = fetch(
        url + "/act", data={**form, "csrf": cookies["redelay_csrf"]}, cookies=cookies
    )
    assert status == 303 and dict(headers)["location"] == "/job?topic=later&id=j1"
    assert store.get("later", "j1") is None


def test_a_csrf_cookie_this_app_did_not_sign_is_refused(store: Store, url: str) -> None:
    """Browsers do not scope cookies by port: any app on 127.0.0.1 can set redelay_csrf. A value
    it chose (of the old unsigned kind, or shaped like a signed one), or one another dashboard
    signed, fails however well the form matches it."""
    store.add(store.new_job("later", "j1", None, delay_ms=600_000))
    genuine = csrf_session(url)["redelay_csrf"]
    nonce, _, signature = genuine.partition(".")
    with serve(create_app(store)) as other:
        foreign = csrf_session(other)["redelay_csrf"]
    planted = [
        "p" * 43,  # what an unsigned double-submit cookie accepted
        f"{nonce}.{'A' * len(signature)}",
        f"{'x' * len(nonce)}.{signature}",
        foreign,
    ]
    form = {"action": "cancel", "topic": "later", "id": "j1"}
    for value in planted:
        jar = {"redelay_csrf": value}
        status, body, headers = fetch(url + "/act", data={**form, "csrf": value}, cookies=jar)
        assert status == 403 and "CSRF" in body, value
        # A page replaces a cookie it did not sign with one it did.
        _, _, headers = fetch(url + "/", cookies=jar)
        replaced = cookie_from(headers, "redelay_csrf")
        assert replaced and replaced != value, value
    assert store.get("later", "j1") is not None


def test_apps_given_one_csrf_secret_accept_each_others_cookie(store: Store) -> None:
    store.add(store.new_job("later", "j1", None, delay_ms=600_000))
    secret = b"s" * 32
    with serve(create_app(store, csrf_secret=secret)) as one:
        cookies = csrf_session(one)
    with serve(create_app(store, csrf_secret=secret)) as two:
        _, _, headers = fetch(two + "/", cookies=cookies)
        assert cookie_from(headers, "redelay_csrf") is None  # kept, not replaced
        form = {"action": "cancel", "topic": "later", "id": "j1"}
        status, _, _ = fetch(
            two + "/act", data={**form, "csrf": cookies["redelay_csrf"]}, cookies=cookies
        )
        assert status == 303
    assert store.get("later", "j1") is None


def test_over_https_the_csrf_cookie_is_a_secure_host_cookie(store: Store, url: str) -> None:
    https = {"X-Forwarded-Proto": "https"}  # uvicorn trusts it from loopback
    _, _, headers = fetch(url + "/", headers=https)
    value = cookie_from(headers, "__Host-redelay_csrf")
    assert value and cookie_from(headers, "redelay_csrf") is None
    (set_cookie,) = [v for k, v in headers if k.lower() == "set-cookie"]
    attributes = {a.strip().lower() for a in set_cookie.split(";")[1:]}
    assert {"secure", "httponly", "path=/", "samesite=strict"} <= attributes, set_cookie
    assert not any(a.startswith("domain") for a in attributes)
    store.add(store.new_job("later", "j1", None, delay_ms=600_000))
    form = {"action": "cancel", "topic": "later", "id": "j1", "csrf": value}
    status, _, _ = fetch(url + "/act", data=form, cookies={"redelay_csrf": value}, headers=https)
    assert status == 403  # over https only the __Host- cookie counts
    jar = {"__Host-redelay_csrf": value}
    status, _, _ = fetch(url + "/act", data=form, cookies=jar, headers=https)
    assert status == 303 and store.get("later", "j1") is None


@pytest.mark.parametrize(
    ("query", "back"),
    [
        ("action=cancel&topic=later&id=j%2F1", "/job?topic=later&amp;id=j%2F1"),
        ("action=purge&topic=graves&id=d1", "/job?topic=graves&amp;id=d1"),
        ("action=purge&job=graves%7Cd1", "/dead"),
        ("action=requeue&all=graves", "/dead?topic=graves"),
        ("action=pause&topic=later&from=overview", "/"),
        ("action=pause&topic=later", "/topic?name=later"),
        ("action=unschedule&schedule=nightly", "/schedules"),
    ],
)
def test_the_confirm_pages_go_back_link_is_a_path_of_the_app_not_the_referer(
    store: Store, url: str, query: str, back: str
) -> None:
    for referer in ["javascript:alert(document.cookie)", "https://evil.example/phish", None]:
        headers = {} if referer is None else {"Referer": referer}
        status, page, _ = fetch(url + "/confirm?" + query, headers=headers)
        assert status == 200, page
        (link,) = re.findall(r'<a href="([^"]*)" id="back">', page)
        assert link == back, referer
        assert "evil.example" not in page and "javascript:" not in page


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("127.0.0.1.example.com", False),  # a name: it resolves wherever its owner says
        ("127.attacker.example", False),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("", False),
    ],
)
def test_only_a_loopback_address_counts_as_loopback(host: str, loopback: bool) -> None:
    from actors.cli.dashboard import is_loopback

    assert is_loopback(host) is loopback


def test_read_only_hides_and_refuses_every_action(store: Store) -> None:
    make_dead(store, "later", "d1")
    with serve(create_app(store, read_only=True)) as base:
        cookies = csrf_session(base)
        status, body, _ = fetch(base + "/job?topic=later&id=d1")
        assert status == 200 and "read-only" in body
        assert 'id="requeue"' not in body and "/confirm" not in body
        status, body, _ = fetch(base + "/confirm?action=requeue&topic=later&id=d1")
        assert status == 403 and "read-only" in body
        form = {"action": "requeue", "topic": "later", "id": "d1", "csrf": cookies["redelay_csrf"]}
        status, _, _ = fetch(base + "/act", data=form, cookies=cookies)
        assert status == 403
    still = store.get("later", "d1")
    assert still is not None and still.state == "dead"


def test_actions_need_the_token_when_there_is_one(store: Store) -> None:
    make_dead(store, "later", "d1")
    with serve(create_app(store, token="s3cret")) as base:
        cookies = csrf_session(base)
        form = {"action": "purge", "topic": "later", "id": "d1", "csrf": cookies["redelay_csrf"]}
        status, body, _ = fetch(base + "/act", data=form, cookies=cookies)
        assert status == 403 and "token" in body
        login = {"token": "wrong", "csrf": cookies["redelay_csrf"]}
        status, _, _ = fetch(base + "/login", data=login, cookies=cookies)
        assert status == 403
        assert store.get("later", "d1") is not None
        status, _, headers = fetch(
            base + "/login", data={**login, "token": "s3cret"}, cookies=cookies
        )
        assert status == 303
        token_cookie = cookie_from(headers, "redelay_token")
        assert token_cookie == "s3cret"
        status, _, _ = fetch(
            base + "/act", data=form, cookies={**cookies, "redelay_token": "s3cret"}
        )
        assert status == 303
    assert store.get("later", "d1") is None


def test_bodies_and_reasons_are_escaped_and_odd_ids_link(store: Store, url: str) -> None:
    evil = "<script>document.title='owned'</script>"
    store.add(store.new_job("later", "a/b+c=d@e", {"html": evil}, delay_ms=600_000))
    make_dead(store, "graves", "d1", traceback=f"Traceback\nValueError: {evil}\n")
    _, page, _ = fetch(url + "/topic?name=later")
    (link,) = re.findall(r'href="(/job\?[^"]*)"', page)
    assert link == "/job?topic=later&amp;id=a%2Fb%2Bc%3Dd%40e"
    for path in [link.replace("&amp;", "&"), "/dead", "/job?topic=graves&id=d1"]:
        status, body, _ = fetch(url + path)
        assert status == 200, path
        assert "<script>document" not in body, path
        assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;" in body, path


def test_the_job_page_tells_a_job_that_ended_from_one_never_added(store: Store, url: str) -> None:
    store.add(store.new_job("later", "j1", None, delay_ms=600_000))
    store.cancel("later", "j1")
    status, page, _ = fetch(url + "/job?topic=later&id=j1")
    assert status == 200 and "does not exist any more" in page and "<b>cancelled</b>" in page
    status, page, _ = fetch(url + "/job?topic=later&id=typo")
    assert status == 404 and "it was never added here" in page
    assert "acked, cancelled or purged" not in page and "any more" not in page


def test_a_limited_topic_says_so_on_the_overview_and_its_page(store: Store, url: str) -> None:
    store.add(store.new_job("mail", "m1", None, delay_ms=600_000))
    store.add(store.new_job("free", "f1", None, delay_ms=600_000))
    _, page, _ = fetch(url + "/topic?name=mail")
    assert 'id="limited"' not in page
    store.set_limits("mail", TopicLimits((10, 2.0), 5))
    _, page, _ = fetch(url + "/")
    row = page.split('data-topic="mail"')[1].split("</tr>")[0]
    assert "limited: 10 per 2.0s, 5 in flight" in row
    assert "limited" not in page.split('data-topic="free"')[1].split("</tr>")[0]
    _, page, _ = fetch(url + "/topic?name=mail")
    assert 'id="limited"' in page and "10 per 2.0s, 5 in flight" in page


def test_a_bad_topic_or_cursor_is_a_clear_400(url: str) -> None:
    status, body, _ = fetch(url + "/topic?name=a%7Cb")
    assert status == 400 and "topic" in body
    status, body, _ = fetch(url + "/topic?name=mail&after=garbage")
    assert status == 400 and "after" in body
    status, body, _ = fetch(url + "/topic?name=mail&state=gone")
    assert status == 400 and "state" in body


def test_mounted_inside_a_starlette_app_links_follow_the_mount_point(store: Store) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    store.add(store.new_job("later", "j1", None, delay_ms=600_000))
    host = Starlette(routes=[Mount("/queue", create_app(store))])
    with serve(host) as base:
        status, body, _ = fetch(base + "/queue/topic?name=later")
        assert status == 200
        assert 'href="/queue/job?topic=later&amp;id=j1"' in body
        assert 'href="/queue/static/style.css"' in body
        status, css, _ = fetch(base + "/queue/static/style.css")
        assert status == 200 and "tr.rising" in css


# -- pause, resume, schedules -------------------------------------------------------------------


def act(base: str, cookies: dict[str, str], **form: str) -> tuple[int, str, str]:
    """POSTs a confirmed action; returns the status, where it redirects, and the result shown."""
    status, _, headers = fetch(
        base + "/act", data={**form, "csrf": cookies["redelay_csrf"]}, cookies=cookies
    )
    location = dict(headers).get("location", "")
    flash = cookie_from(headers, "redelay_flash") or ""
    return status, location, urllib.parse.unquote(flash)


def add_schedule(store: Store, name: str, body: bytes = b"null") -> None:
    spec = ScheduleSpec(name, "reports", None, 3_600_000, "UTC", body, None, "run_once")
    assert store.schedule(spec)[0] == "created"


def test_pause_and_resume_change_redis_are_audited_and_show_on_the_pages(
    store: Store, url: str
) -> None:
    store.add(store.new_job("mail", "m1", None, delay_ms=600_000))
    cookies = csrf_session(url)
    _, page, _ = fetch(url + "/")
    assert 'class="paused"' not in page and "action=pause&amp;topic=mail&amp;from=overview" in page
    status, page, _ = fetch(url + "/confirm?action=pause&topic=mail&from=overview")
    assert status == 200 and "Pause topic mail?" in page and 'name="from" value="overview"' in page
    assert store.paused_topics() == set()  # the confirmation page changes nothing

    status, location, flash = act(
        url, cookies, action="pause", topic="mail", **{"from": "overview"}
    )
    assert (status, location) == (303, "/")
    assert flash == "Paused topic mail: no worker leases its jobs until it is resumed."
    assert store.paused_topics() == {"mail"}
    _, page, _ = fetch(url + "/")
    assert re.search(r'data-topic="mail">\s*<td><a[^>]*>mail</a>\s*<span class="paused"', page)
    assert "action=resume&amp;topic=mail" in page
    _, page, _ = fetch(url + "/topic?name=mail")
    assert 'id="paused"' in page and 'id="resume"' in page and 'id="pause"' not in page
    _, _, flash = act(url, cookies, action="pause", topic="mail")
    assert flash == "Topic mail was paused already: nothing changed."

    status, location, flash = act(url, cookies, action="resume", topic="mail")
    assert (status, location) == (303, "/topic?name=mail")
    assert flash == "Resumed topic mail: its workers lease again."
    assert store.paused_topics() == set()
    events = [f["e"] for _, f in store.recent_audit(100) if f.get("e") in ("paused", "resumed")]
    assert events == ["paused", "resumed"]


def test_the_schedules_page_lists_and_removes_a_schedule(store: Store, url: str) -> None:
    add_schedule(store, "hourly-report", b'{"kind": "sales"}')
    add_schedule(store, "keep")
    cookies = csrf_session(url)
    status, page, _ = fetch(url + "/schedules")
    assert status == 200 and 'href="/schedules"' in page
    row = page.split('data-schedule="hourly-report"')[1].split("</tr>")[0]
    assert "every 1h00m" in row and "<td>UTC</td>" in row and "run_once" in row
    assert re.search(r"<td>in (59m\d\ds|1h00m)</td>", row), row
    assert "&#34;kind&#34;: &#34;sales&#34;" in row
    (info,) = [i for i in store.schedules() if i.spec.name == "hourly-report"]
    assert info.next_ms is not None and views.utc(info.next_ms) in row
    status, page, _ = fetch(url + "/confirm?action=unschedule&schedule=hourly-report")
    assert status == 200 and "Remove schedule hourly-report?" in page
    assert len(store.schedules()) == 2

    status, location, flash = act(url, cookies, action="unschedule", schedule="hourly-report")
    assert (status, location) == (303, "/schedules")
    assert flash.startswith("Removed schedule hourly-report")
    assert [i.spec.name for i in store.schedules()] == ["keep"]
    assert info.pending_id is not None and store.get("reports", info.pending_id) is None
    _, _, flash = act(url, cookies, action="unschedule", schedule="hourly-report")
    assert flash == "No schedule hourly-report: nothing removed."
    status, _, _ = act(url, cookies, action="unschedule", schedule="bad name")
    assert status == 400


def test_read_only_hides_and_refuses_pause_resume_and_remove(store: Store) -> None:
    store.add(store.new_job("mail", "m1", None, delay_ms=600_000))
    store.pause("billing", True)
    add_schedule(store, "nightly")
    with serve(create_app(store, read_only=True)) as base:
        cookies = csrf_session(base)
        for path in ["/", "/topic?name=mail", "/topic?name=billing", "/schedules"]:
            status, page, _ = fetch(base + path)
            assert status == 200 and "/confirm" not in page, path
        _, page, _ = fetch(base + "/")
        assert 'class="paused"' in page  # the state still shows
        for form in [
            {"action": "pause", "topic": "mail"},
            {"action": "resume", "topic": "billing"},
            {"action": "unschedule", "schedule": "nightly"},
        ]:
            status, _, _ = act(base, cookies, **form)
            assert status == 403, form
            status, page, _ = fetch(base + "/confirm?" + urllib.parse.urlencode(form))
            assert status == 403 and "read-only" in page, form
    assert store.paused_topics() == {"billing"}
    assert [i.spec.name for i in store.schedules()] == ["nightly"]


def test_a_pause_or_remove_without_the_csrf_value_changes_nothing(store: Store, url: str) -> None:
    add_schedule(store, "nightly")
    cookies = csrf_session(url)
    for form in [
        {"action": "pause", "topic": "mail"},
        {"action": "unschedule", "schedule": "nightly"},
    ]:
        status, body, _ = fetch(url + "/act", data={**form, "csrf": "forged"}, cookies=cookies)
        assert status == 403 and "CSRF" in body
    assert store.paused_topics() == set() and len(store.schedules()) == 1


def test_a_schedule_body_and_name_are_escaped(store: Store, url: str) -> None:
    evil = "<script>document.title='owned'</script>"
    add_schedule(store, "a.b:c-d_e", json.dumps({"html": evil}).encode())
    _, page, _ = fetch(url + "/schedules")
    assert "<script>document" not in page
    assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;" in page
    assert 'href="/confirm?action=unschedule&amp;schedule=a.b%3Ac-d_e"' in page
