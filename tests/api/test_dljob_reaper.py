"""The reaper deletes only the DLJob it read: a DLJob created under the same name
since then (another job's) stays. Against the session's real control plane, which
checks a delete's uid precondition (409 if it differs)."""

from __future__ import annotations

from typing import Any

import pytest

from api.cluster_mode.reaper import DLJobRef, Reaper
from operators.kube import KubeApi, Obj
from tests.operators.builders import make_dljob
from tests.operators.real_cluster import RealCluster


class ReplacedAfterRead(KubeApi):
    """A KubeApi whose every DLJob read is followed, before the caller acts on it, by
    another client deleting that DLJob and creating a new one of the same name."""

    def get_dljob(self, namespace: str, name: str) -> Obj:
        read = super().get_dljob(namespace, name)
        super().delete_dljob(namespace, name)
        self.create_dljob(namespace, make_dljob(name))
        return read


def _uid(api: KubeApi, name: str) -> str:
    return str(api.get_dljob("default", name)["metadata"]["uid"])


@pytest.fixture
def kube(kube_cluster: RealCluster) -> Any:
    """An API client of a server with the DLJob CRD and one DLJob, "a"."""
    kube_cluster.api.create_dljob("default", make_dljob("a"))
    return kube_cluster.client


def test_a_dljob_replaced_between_read_and_delete_is_left_alone(kube: Any) -> None:
    api = KubeApi(kube)
    first = _uid(api, "a")
    reaper = Reaper(ReplacedAfterRead(kube))
    assert reaper.delete_now(DLJobRef("default", "a", uid=None))  # done: not ours any more
    second = _uid(api, "a")
    assert second != first  # the new DLJob of the same name is still there


def test_delete_with_a_uid_deletes_only_that_dljob(kube: Any) -> None:
    api = KubeApi(kube)
    old = _uid(api, "a")
    assert api.delete_dljob("default", "a", uid=old)
    api.create_dljob("default", make_dljob("a"))
    assert not api.delete_dljob("default", "a", uid=old)  # another DLJob's name now
    new = _uid(api, "a")
    assert new != old
    assert api.delete_dljob("default", "a", uid=new)
    assert not api.delete_dljob("default", "a")  # gone
