"""The test API server's watches: resource versions, the history window, selectors,
bookmarks, initial events, and closing the streams."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from tests.kube.conftest import (
    NS,
    create_job,
    names,
)
from tests.kube.samples import (
    GROUP,
    PLURAL,
    VERSION,
    make_pod,
)


def collect(stream: Any, count: int) -> list[tuple[str, str]]:
    seen = []
    for event in stream:
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(seen) == count:
            break
    return seen


def in_thread(fn: Callable[[], object], delay_s: float = 0.2) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        fn()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_watch_from_list_rv_sees_added_modified_deleted_in_order(core: Any) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "before"}})
    rv = core.list_namespaced_config_map(NS).metadata.resource_version

    def writes() -> None:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
        core.patch_namespaced_config_map("c", NS, {"data": {"k": "v"}})
        core.delete_namespaced_config_map("c", NS)

    writer = in_thread(writes)
    w = watch.Watch()
    events = collect(
        w.stream(core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=5), 3
    )
    w.stop()
    writer.join()
    assert events == [("ADDED", "c"), ("MODIFIED", "c"), ("DELETED", "c")]


def test_watch_without_rv_starts_with_current_state(core: Any) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    w = watch.Watch()
    assert collect(w.stream(core.list_namespaced_config_map, NS, timeout_seconds=5), 1) == [
        ("ADDED", "a")
    ]
    w.stop()


def test_watch_server_timeout_ends_stream_cleanly(core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=1
        )
    )
    assert events == [] and 0.9 < time.monotonic() - started < 3


def test_watch_from_compacted_rv_gets_410_and_relist_recovers(
    kube_server: KubeServer, core: Any
) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    old_rv = core.list_namespaced_config_map(NS).metadata.resource_version
    core.create_namespaced_config_map(NS, {"metadata": {"name": "b"}})
    kube_server.compact()
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, NS, resource_version=old_rv, timeout_seconds=2
            )
        )
    assert err.value.status == 410
    # Raw stream: 200, then one ERROR event carrying a 410 Expired Status, as a real server.
    response = core.list_namespaced_config_map(
        NS, watch=True, resource_version=old_rv, _preload_content=False
    )
    (line,) = [x for x in response.read().decode().splitlines() if x]
    event = json.loads(line)
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    relisted = core.list_namespaced_config_map(NS)
    assert names(relisted.items) == ["a", "b"]
    writer = in_thread(lambda: core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}}))
    w = watch.Watch()
    assert collect(
        w.stream(
            core.list_namespaced_config_map,
            NS,
            resource_version=relisted.metadata.resource_version,
            timeout_seconds=5,
        ),
        1,
    ) == [("ADDED", "c")]
    w.stop()
    writer.join()


def test_history_window_is_bounded() -> None:
    with KubeServer(options=ServerOptions(history_limit=5)) as small:
        small_core = client.CoreV1Api(small.api_client())
        rv = small_core.list_namespaced_config_map(NS).metadata.resource_version
        for i in range(12):
            small_core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as err:
            list(
                watch.Watch().stream(
                    small_core.list_namespaced_config_map,
                    NS,
                    resource_version=rv,
                    timeout_seconds=1,
                )
            )
        assert err.value.status == 410


def test_watch_with_label_selector_sees_objects_enter_and_leave(core: Any) -> None:
    core.create_namespaced_pod(NS, make_pod("p", {"app": "x"}))
    rv = core.list_namespaced_pod(NS).metadata.resource_version

    def writes() -> None:
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "y"}}})
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "x"}}})
        core.patch_namespaced_pod("p", NS, {"metadata": {"annotations": {"k": "v"}}})

    writer = in_thread(writes)
    w = watch.Watch()
    events = collect(
        w.stream(
            core.list_namespaced_pod,
            NS,
            label_selector="app=x",
            resource_version=rv,
            timeout_seconds=5,
        ),
        3,
    )
    w.stop()
    writer.join()
    assert events == [("DELETED", "p"), ("ADDED", "p"), ("MODIFIED", "p")]


def test_watch_bookmarks_carry_the_current_rv(core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        NS,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        assert event["type"] == "BOOKMARK"
        assert event["raw_object"]["metadata"]["resourceVersion"] == rv
        break
    w.stop()


def test_close_watches_ends_open_streams(kube_server: KubeServer, core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    closer = in_thread(kube_server.close_watches, delay_s=0.3)
    started = time.monotonic()
    assert (
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=30
            )
        )
        == []
    )
    closer.join()
    assert time.monotonic() - started < 5


def test_close_watches_abruptly_cuts_the_connection(kube_server: KubeServer, core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    closer = in_thread(lambda: kube_server.close_watches(abrupt=True), delay_s=0.3)
    stream = watch.Watch().stream(
        core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=30
    )
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(stream)
    closer.join()


def test_watch_of_custom_resources(custom: Any) -> None:
    rv = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["metadata"][
        "resourceVersion"
    ]
    writer = in_thread(lambda: create_job(custom, "a"))
    w = watch.Watch()
    assert collect(
        w.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            NS,
            PLURAL,
            resource_version=rv,
            timeout_seconds=5,
        ),
        1,
    ) == [("ADDED", "a")]
    w.stop()
    writer.join()


def test_send_initial_events_ends_with_a_marked_bookmark(
    kube_server: KubeServer, core: Any
) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    path = (
        f"{kube_server.url}/api/v1/namespaces/{NS}/configmaps?watch=1&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    with urllib.request.urlopen(path, timeout=5) as response:
        events = [json.loads(line) for line in response.read().splitlines() if line]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
