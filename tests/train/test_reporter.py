import time
from collections.abc import Iterator

import pytest

from gpuflow.train import reporter
from gpuflow.train.placement import ReportTarget
from gpuflow.train.reporter import Reporter
from tests.train.metrics_server import MetricsServer, free_port


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = MetricsServer().start()
    yield s
    s.stop()


def _target(url: str) -> ReportTarget:
    return ReportTarget(api_url=url, job_id="j-7", token="tok")


def _wait(cond: object, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if callable(cond) and cond():
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_batches_arrive_with_the_token_at_most_1000_per_request(server: MetricsServer) -> None:
    r = Reporter(_target(server.url))
    for i in range(2500):
        r.add(reporter.LOSS, 1.0 / (i + 1), i)
    r.close()
    assert {q.path for q in server.requests} == {"/jobs/j-7/metrics"}
    assert {q.token for q in server.requests} == {"tok"}
    assert max(len(q.metrics) for q in server.requests) <= reporter.MAX_PER_REQUEST
    got = server.metrics("loss")
    assert [m["step"] for m in got] == list(range(2500))
    assert got[3] == {"name": "loss", "value": 0.25, "step": 3}
    assert (r.sent, r.dropped) == (2500, 0)


def test_adding_never_blocks_when_the_api_is_down_and_the_oldest_are_dropped() -> None:
    r = Reporter(_target(f"http://127.0.0.1:{free_port()}"), queue_limit=100)
    start = time.monotonic()
    for i in range(5000):
        r.add(reporter.LOSS, 0.5, i)
    assert time.monotonic() - start < 0.5
    assert r.pending() <= 100
    assert r.dropped >= 4900 - 1000  # one batch may be in flight
    r.close(deadline_s=0.5)


def test_adding_never_blocks_when_the_api_is_slow(server: MetricsServer) -> None:
    server.delay_s = 1.0
    r = Reporter(_target(server.url), timeout_s=5.0)
    r.add(reporter.LOSS, 1.0, 0)
    time.sleep(0.1)  # the first request is now hanging in the server
    start = time.monotonic()
    for i in range(1, 200):
        r.add(reporter.LOSS, 1.0, i)
    assert time.monotonic() - start < 0.2
    r.close()
    assert len(server.metrics()) == 200


def test_backs_off_exponentially_while_the_api_fails_then_delivers(server: MetricsServer) -> None:
    server.status = 503
    r = Reporter(_target(server.url), backoff_first_s=0.1, backoff_max_s=0.4)
    r.add(reporter.GPUS, 2, 1)
    _wait(lambda: len(server.attempts) >= 5)
    gaps = [b - a for a, b in zip(server.attempts, server.attempts[1:], strict=False)][:4]
    # 0.1, 0.2, 0.4, 0.4 (capped), each plus a request's latency
    assert gaps[0] == pytest.approx(0.1, abs=0.08)
    assert gaps[1] == pytest.approx(0.2, abs=0.08)
    assert gaps[2] == pytest.approx(0.4, abs=0.1)
    assert gaps[3] == pytest.approx(0.4, abs=0.1)
    server.status = 201
    _wait(lambda: len(server.requests) == 1)
    r.close()
    assert server.metrics() == [{"name": "gpus", "value": 2.0, "step": 1}]
    assert r.failures >= 4


def test_without_a_target_nothing_is_sent_and_nothing_runs() -> None:
    r = Reporter(None)
    r.add(reporter.LOSS, 1.0, 0)
    assert r.pending() == 0
    r.close()


def test_close_gives_up_at_its_deadline_when_the_api_is_away() -> None:
    r = Reporter(_target(f"http://127.0.0.1:{free_port()}"), backoff_first_s=10.0)
    r.add(reporter.LOSS, 1.0, 0)
    start = time.monotonic()
    r.close(deadline_s=0.3)
    assert time.monotonic() - start < 2.0
    assert r.pending() == 1 and r.sent == 0
