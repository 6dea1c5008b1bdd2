"""Watch streams: the events one `?watch=1` request is sent, until it ends.

Called by apiserver.py's handler for the watch verb: `WatchRequest.parse` reads the
query (an invalid resourceVersion is a 400, before anything is sent), then `stream`
sends, through the handler's chunk writer, the current objects as ADDED (without a
resourceVersion, or `0`, or with `sendInitialEvents`), then the store's events after
it (store.Store.events_after) as this watcher sees them (`Viewer`: selectors applied
as the watch cache does), and BOOKMARKs if asked, until the timeout, the server
stopping or closing watches, or the client hanging up. A resourceVersion no longer in
the history raises the store's 410 Expired, which the handler sends as an ERROR event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuflow.sandbox.kube.errors import bad_request
from gpuflow.sandbox.kube.resources import ResourceType
from gpuflow.sandbox.kube.selectors import Matcher
from gpuflow.sandbox.kube.serving.routing import Route, flag
from gpuflow.sandbox.kube.storage.history import WatchEvent
from gpuflow.sandbox.kube.storage.store import Store

# How often an idle watch checks that its client is still there, so that abandoned
# watches do not hold a thread until their timeout.
_LIVENESS_CHECK_S = 1.0
Obj = dict[str, Any]


@dataclass(frozen=True)
class WatchRequest:
    """What a watch asked for, read from its query."""

    rt: ResourceType
    namespace: str
    match: Matcher
    rv_param: str  # "" or digits
    bookmarks: bool
    initial: bool
    deadline: float  # time.monotonic() at which the stream ends cleanly

    @classmethod
    def parse(
        cls, route: Route, query: dict[str, str], match: Matcher, default_timeout_s: float
    ) -> WatchRequest:
        rv_param = query.get("resourceVersion", "")
        if rv_param and not rv_param.isdigit():
            raise bad_request(f'invalid resource version "{rv_param}"')
        timeout_s = float(query.get("timeoutSeconds") or default_timeout_s)
        return cls(
            route.rt,
            route.namespace,
            match,
            rv_param,
            bookmarks=flag(query, "allowWatchBookmarks"),
            initial=flag(query, "sendInitialEvents"),
            deadline=time.monotonic() + timeout_s,
        )


def stream(
    request: WatchRequest,
    store: Store,
    bookmark_interval_s: float,
    send: Callable[[Obj], None],
    stopped: Callable[[], bool],
    ended: Callable[[], bool],
) -> None:
    """Send a watch's events until its deadline or `ended()` (the server stopped, its
    watches were closed, or the client went); `stopped()` also wakes the store's wait."""
    rt, match = request.rt, request.match
    view = Viewer(rt, request.namespace, match)
    if request.rv_param in ("", "0") or request.initial:
        items, last_rv = store.snapshot(rt, request.namespace)
        for obj in items:
            if match(obj):
                send({"type": "ADDED", "object": obj})
        if request.initial:
            send(view.bookmark(last_rv, initial_end=True))
    else:
        last_rv = int(request.rv_param)
    last_bookmark = time.monotonic()
    while not ended():
        now = time.monotonic()
        wait = min(request.deadline - now, _LIVENESS_CHECK_S)
        if request.bookmarks:
            wait = min(wait, last_bookmark + bookmark_interval_s - now)
        if request.deadline - now <= 0:
            break
        events, last_rv = store.events_after(rt.key, last_rv, max(wait, 0), stopped)
        for event in events:
            shown = view.event(event)
            if shown is not None:
                send(shown)
        if request.bookmarks and time.monotonic() - last_bookmark >= bookmark_interval_s:
            send(view.bookmark(last_rv))
            last_bookmark = time.monotonic()


@dataclass(frozen=True)
class Viewer:
    """What one watcher sees of a store event, selectors applied as the watch cache does:
    an object leaving the selection is DELETED for it, one entering it is ADDED."""

    rt: ResourceType
    namespace: str
    match: Matcher

    def _passes(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.match(obj)

    def event(self, event: WatchEvent) -> Obj | None:
        new = {**event.obj, "apiVersion": self.rt.api_version}
        if event.type == "ADDED":
            return {"type": "ADDED", "object": new} if self._passes(event.obj) else None
        if event.type == "DELETED":
            passes = self._passes(event.old or event.obj)
            return {"type": "DELETED", "object": new} if passes else None
        now, before = self._passes(event.obj), self._passes(event.old)
        if now:
            return {"type": "MODIFIED" if before else "ADDED", "object": new}
        if before and event.old is not None:
            old = {
                **event.old,
                "apiVersion": self.rt.api_version,
                "metadata": {**event.old["metadata"], "resourceVersion": str(event.rv)},
            }
            return {"type": "DELETED", "object": old}
        return None

    def bookmark(self, rv: int, initial_end: bool = False) -> Obj:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {
            "type": "BOOKMARK",
            "object": {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta},
        }
