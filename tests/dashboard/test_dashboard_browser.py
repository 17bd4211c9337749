"""The dashboard in a real browser: Debian's chromium, headless, driven by Selenium through
Debian's chromedriver (`make browser` installs both; nothing is downloaded here).

A private Redis, a worker handling "mail" (ids starting "bad" fail until dead, "slow" ones
hold their slot), and the dashboard served by uvicorn. Every page is opened, every action
clicked and confirmed, and Redis is checked to have changed as the click said. Screenshots go
to a temporary directory, or to docs/img with REDELAY_DASHBOARD_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("starlette", reason="the dashboard extra (pip install '.[dashboard]')")
from _dashboard import serve
from _wait import wait_until

from actors import DelayQueue, Job
from actors.dashboard import create_app
from actors.server.embedded import RedisProcess

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
NS = "shop"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the test extra)")
if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
    pytest.skip(
        f"no browser: {CHROMIUM} and {CHROMEDRIVER} are needed (`make browser` installs "
        "Debian's chromium and chromium-driver)",
        allow_module_level=True,
    )
from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    # On a loaded machine an element may appear a moment after the page reports loaded: each
    # lookup retries up to this long (an assertion that something is absent waits it out once).
    driver.implicitly_wait(10)
    yield driver
    driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    if os.environ.get("REDELAY_DASHBOARD_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(exist_ok=True)
        return DOCS_IMG
    return tmp_path


@pytest.fixture
def worker(redis_client: redis.Redis, redis_server: RedisProcess) -> Iterator[DelayQueue]:
    release = threading.Event()
    queue = DelayQueue(redis_server.url, namespace=NS, consumer_name="worker-1")

    @queue.handler("mail", concurrency=4, retry=[0.05])
    def send(job: Job) -> None:
        if job.id == "bad-3":
            raise ValueError("no such address")
        if job.id.startswith("bad"):
            raise ConnectionError("smtp refused")
        if job.id.startswith("slow"):
            release.wait(30)

    queue.start()
    yield queue
    release.set()
    queue.stop(grace=1)


@pytest.fixture
def producer(redis_server: RedisProcess, worker: DelayQueue) -> Iterator[DelayQueue]:
    queue = DelayQueue(redis_server.url, namespace=NS, producer_only=True)
    yield queue
    queue.close()


@pytest.fixture
def url(producer: DelayQueue) -> Iterator[str]:
    with serve(create_app(producer)) as base:
        yield base


def state(queue: DelayQueue, topic: str, job_id: str) -> str | None:
    info = queue.get(topic, job_id)
    return None if info is None else info.state.value


def to_next_page(driver: Any, act: Any) -> None:
    """Runs ``act`` (a click, a submit) and waits until the browser shows the page it led to
    (a submit returns before the navigation)."""
    old = driver.find_element(By.TAG_NAME, "html")
    act()

    def replaced() -> bool:
        try:
            old.tag_name  # noqa: B018 (raises once the old page is gone)
        except StaleElementReferenceException:
            pass
        except WebDriverException as exc:
            # Caught mid-navigation, chromium reports the old node as no longer in the document
            # with a generic error rather than a stale reference: the old page is gone too.
            if "does not belong to the document" not in str(exc):
                raise
        else:
            return False
        return bool(driver.execute_script("return document.readyState") == "complete")

    wait_until(replaced, what="the next page")


def job_ids(driver: Any) -> list[str]:
    return [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody td:first-child a")]


def click_and_confirm(driver: Any, element_id: str) -> str:
    """Clicks an action, then "Yes" on its confirmation page; returns the result shown."""
    to_next_page(driver, driver.find_element(By.ID, element_id).click)
    question = driver.find_element(By.ID, "question").text
    to_next_page(driver, driver.find_element(By.ID, "confirm").click)
    flash: str = driver.find_element(By.ID, "flash").text
    assert question, "the confirmation page says what will happen"
    return flash


@pytest.mark.slow
def test_every_page_and_action(
    browser: Any, url: str, producer: DelayQueue, worker: DelayQueue, shots: Path
) -> None:
    q = producer
    for n in range(60):
        q.add("mail", f"later-{n:02d}", {"to": f"user{n}@example.com"}, delay=3600 + n)
    q.add("mail", "slow-1", {"to": "big@example.com"})
    for n in range(3):
        q.add("mail", f"bad-{n}", {"to": f"bounce{n}@example.com"})
    q.add("billing", "invoice-7", {"html": "<script>document.title='owned'</script>"}, delay=600)
    for n in range(40):
        q.add("mail", f"ok-{n}", {"n": n})
    wait_until(lambda: q.stats()["mail"]["dead"] == 3, what="the three bad jobs to die")
    wait_until(lambda: q.stats()["mail"]["leased"] == 1, what="the slow job to be running")

    # Overview: every topic with its counts; a second look sees the dead count rising.
    browser.get(url + "/")
    q.add("mail", "bad-3", None)
    wait_until(lambda: q.stats()["mail"]["dead"] == 4, what="a fourth dead job")
    wait_until(lambda: q.stats()["mail"]["ready"] == 0, what="ready jobs to be taken")
    browser.get(url + "/")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-topic="mail"]')
    assert row.get_attribute("class") == "rising" and "dead rising" in row.text
    cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "td.num")]
    assert cells == ["60", "0", "1", "4"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart rect")) == 60
    browser.save_screenshot(str(shots / "dashboard-overview.png"))

    # Topic: one page of 50 delayed jobs, the next page, the id filter.
    to_next_page(browser, browser.find_element(By.LINK_TEXT, "mail").click)
    assert job_ids(browser) == [f"later-{n:02d}" for n in range(50)]
    assert "in 1h00m" in browser.find_element(By.ID, "jobs").text
    browser.save_screenshot(str(shots / "dashboard-topic.png"))
    to_next_page(browser, browser.find_element(By.ID, "next").click)
    assert job_ids(browser) == [f"later-{n:02d}" for n in range(50, 60)]
    browser.get(url + "/topic?name=mail")
    browser.find_element(By.ID, "prefix").send_keys("later-1")
    to_next_page(browser, browser.find_element(By.ID, "prefix").submit)
    assert job_ids(browser) == [f"later-1{n}" for n in range(10)]

    # Job: a leased one shows its holder; a body holding <script> shows as text.
    browser.get(url + "/topic?name=mail&state=leased")
    to_next_page(browser, browser.find_element(By.LINK_TEXT, "slow-1").click)
    assert browser.find_element(By.ID, "state").text == "leased"
    assert "worker-1" in browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    browser.get(url + "/job?topic=billing&id=invoice-7")
    assert "<script>document.title='owned'</script>" in browser.find_element(By.ID, "body").text
    assert browser.title != "owned"
    assert browser.find_elements(By.CSS_SELECTOR, "main script") == []

    # Actions on a delayed job: run now, reschedule, cancel.
    browser.get(url + "/job?topic=mail&id=later-00")
    browser.save_screenshot(str(shots / "dashboard-job.png"))
    assert click_and_confirm(browser, "run_now") == "mail/later-00 is due now."
    wait_until(lambda: q.get("mail", "later-00") is None, what="the worker to run later-00")
    browser.get(url + "/job?topic=mail&id=later-01")
    browser.find_element(By.ID, "due").send_keys("+2h")
    assert click_and_confirm(browser, "reschedule") == "mail/later-01 rescheduled."
    moved = q.get("mail", "later-01")
    assert moved is not None
    assert abs(moved.due_ms - (q.clock.now_ms() + 7_200_000)) < 60_000
    assert click_and_confirm(browser, "cancel") == "Cancelled mail/later-01."
    assert q.get("mail", "later-01") is None
    assert [e.event for e in q.history("mail", "later-01")][-2:] == ["replaced", "cancelled"]

    # A dead job: its timeline names the failure and keeps the traceback; requeue it.
    browser.get(url + "/job?topic=mail&id=bad-0")
    timeline = browser.find_element(By.ID, "timeline").text
    assert "ConnectionError" in browser.find_element(By.CSS_SELECTOR, "pre.traceback").text
    assert "dead" in timeline and "why=" in timeline
    browser.save_screenshot(str(shots / "dashboard-dead-job.png"))
    assert click_and_confirm(browser, "requeue") == "Requeued 1 dead job."
    wait_until(
        lambda: [e.event for e in q.history("mail", "bad-0")].count("dead") == 2,
        what="the requeued bad job to be run (and die) again",
    )

    # Dead page: grouped by reason; purge a selection, then requeue all of the topic.
    browser.get(url + "/dead")
    groups = [
        (g.find_element(By.CSS_SELECTOR, ".reason").text, len(g.find_elements(By.NAME, "job")))
        for g in browser.find_elements(By.CSS_SELECTOR, ".group")
    ]
    assert groups == [("ConnectionError: smtp refused", 3), ("ValueError: no such address", 1)]
    browser.save_screenshot(str(shots / "dashboard-dead.png"))
    for member in ("mail|bad-1", "mail|bad-2"):
        browser.find_element(By.CSS_SELECTOR, f'input[value="{member}"]').click()
    assert click_and_confirm(browser, "purge_selected") == "Purged 2 dead jobs."
    assert q.get("mail", "bad-1") is None and q.get("mail", "bad-2") is None
    browser.get(url + "/dead?topic=mail")
    assert click_and_confirm(browser, "purge_all") == "Purged 2 dead jobs."
    assert q.stats()["mail"]["dead"] == 0

    # Workers: the running worker, its topic and its busy slot.
    browser.get(url + "/workers")
    text = browser.find_element(By.ID, "workers").text
    assert "worker-1" in text and "mail" in text and "1/4" in text
    browser.save_screenshot(str(shots / "dashboard-workers.png"))

    # Pause "mail" from the overview: the badge shows and the worker leases none of its jobs;
    # resume it from the topic page and the held job runs.
    browser.get(url + "/")
    assert click_and_confirm(browser, "pause-mail") == (
        "Paused topic mail: no worker leases its jobs until it is resumed."
    )
    assert browser.current_url == url + "/"
    assert q.stats()["mail"]["paused"] == 1
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-topic="mail"]')
    assert row.find_element(By.CSS_SELECTOR, ".paused").text.lower() == "paused"
    assert row.find_elements(By.ID, "resume-mail") and not row.find_elements(By.ID, "pause-mail")
    q.add("mail", "held-1", {"to": "later@example.com"})
    wait_until(lambda: state(q, "mail", "held-1") == "ready", what="held-1 to be ready")
    browser.get(url + "/topic?name=mail&state=ready")
    assert job_ids(browser) == ["held-1"]
    assert browser.find_element(By.ID, "paused").text.lower() == "paused"
    browser.save_screenshot(str(shots / "dashboard-paused.png"))
    assert click_and_confirm(browser, "resume") == "Resumed topic mail: its workers lease again."
    assert q.stats()["mail"]["paused"] == 0 and browser.find_elements(By.ID, "pause")
    wait_until(lambda: q.get("mail", "held-1") is None, what="the worker to run held-1")
    assert [e.event for e in q.history("mail", "held-1")][-1] == "acked"

    # Schedules: listed with their next occurrence; remove one.
    q.schedule("nightly-digest", "billing", cron="0 3 * * *", tz="Europe/Paris", body={"n": 1})
    q.schedule("invoice-sweep", "billing", every=900, misfire="skip")
    browser.find_element(By.LINK_TEXT, "Schedules").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#schedules tbody tr")
    assert [r.get_attribute("data-schedule") for r in rows] == ["invoice-sweep", "nightly-digest"]
    assert "0 3 * * *" in rows[1].text and "Europe/Paris" in rows[1].text
    assert "every 15m" in rows[0].text and "skip" in rows[0].text
    browser.save_screenshot(str(shots / "dashboard-schedules.png"))
    assert click_and_confirm(browser, "unschedule-nightly-digest").startswith(
        "Removed schedule nightly-digest"
    )
    assert [i.spec.name for i in q.schedules()] == ["invoice-sweep"]
    assert [
        r.get_attribute("data-schedule")
        for r in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody tr")
    ] == ["invoice-sweep"]


@pytest.mark.slow
def test_read_only_shows_no_action(browser: Any, producer: DelayQueue) -> None:
    producer.add("billing", "invoice-1", {"n": 1}, delay=600)
    with serve(create_app(producer, read_only=True)) as base:
        browser.get(base + "/job?topic=billing&id=invoice-1")
        assert browser.find_elements(By.CSS_SELECTOR, ".actions") == []
        assert "read-only" in browser.find_element(By.TAG_NAME, "header").text
        browser.get(base + "/confirm?action=cancel&topic=billing&id=invoice-1")
        assert "read-only" in browser.find_element(By.ID, "problem").text
        for path in ["/", "/topic?name=billing", "/schedules"]:
            browser.get(base + path)
            assert browser.find_elements(By.CSS_SELECTOR, "a[href*=confirm]") == [], path
    assert state(producer, "billing", "invoice-1") == "delayed"
