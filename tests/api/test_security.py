"""Security of the service (issue 15): a caller's cluster name never opens a file.

`POST /replays` `cluster` and `POST /replays/sweeps` `clusters[]` are resolved by
`controller.spec.named_cluster` (presets, PRESET:N, NODESxGPUS) and nothing else; a
probe records every file the process opens or stats while the request runs.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.builders import auth, upload_trace

REPLAYS = "/api/v1/replays"
SECRET_LINE = "num_switch,num_node_p_switch,num_gpu_p_node"


class FileProbe:
    """Records each path opened or stat'ed whose text contains one of `names`."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.touched: list[str] = []

    def see(self, path: Any) -> None:
        text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        if any(name in text for name in self.names):
            self.touched.append(text)


@pytest.fixture()
def probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FileProbe]:
    """The server's working directory holds a CSV cluster spec and a directory, as an
    attacker would hope; every open and stat of them (or of /etc, README) is recorded."""
    (tmp_path / "spec.csv").write_text(f"{SECRET_LINE}\n1,2,4\n")
    (tmp_path / "README.md").write_text("# secret readme\n")
    (tmp_path / "traces").mkdir()
    monkeypatch.chdir(tmp_path)
    seen = FileProbe(["shadow", "README", "spec.csv", "traces", str(tmp_path)])
    real_open, real_stat, real_os_open = builtins.open, os.stat, os.open

    def open_(file: Any, *args: Any, **kwargs: Any) -> Any:
        seen.see(file)
        return real_open(file, *args, **kwargs)

    def stat_(path: Any, *args: Any, **kwargs: Any) -> Any:
        seen.see(path)
        return real_stat(path, *args, **kwargs)

    def os_open_(path: Any, *args: Any, **kwargs: Any) -> Any:
        seen.see(path)
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(os, "stat", stat_)
    monkeypatch.setattr(os, "open", os_open_)
    yield seen


BAD_CLUSTERS = ["/etc/shadow", "../README.md", "README.md", "spec.csv", "traces", "x"]


@pytest.mark.parametrize("name", BAD_CLUSTERS)
def test_a_replay_cluster_is_never_opened_as_a_file(
    client: TestClient, trace_file: Path, probe: FileProbe, name: str
) -> None:
    alice = auth(client, "alice", "vision")
    trace = upload_trace(client, alice, trace_file)
    probe.touched.clear()
    body = {"trace_id": trace["id"], "policy": "fifo", "cluster": name}
    r = client.post(REPLAYS, json=body, headers=alice)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "cluster"]
    assert SECRET_LINE not in r.text and "secret readme" not in r.text
    assert probe.touched == []


@pytest.mark.parametrize("name", BAD_CLUSTERS)
def test_a_sweep_cluster_is_never_opened_as_a_file(
    client: TestClient, trace_file: Path, probe: FileProbe, name: str
) -> None:
    alice = auth(client, "alice", "vision")
    trace = upload_trace(client, alice, trace_file)
    probe.touched.clear()
    body = {"trace_ids": [trace["id"]], "policies": ["fifo"], "clusters": ["2x4", "1x8", name]}
    r = client.post(f"{REPLAYS}/sweeps", json=body, headers=alice)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "clusters", 2]
    if "/" not in name:  # the schema's pattern refuses paths before the resolver runs
        assert detail["msg"].startswith(f"clusters[2]: unknown cluster {name!r} (presets: ")
        assert "dgx-a100" in detail["msg"]
    assert SECRET_LINE not in r.text and "secret readme" not in r.text
    assert probe.touched == []


@pytest.mark.parametrize("name", ["dgx-a100", "g4dn-12xlarge:16", "2x4"])
def test_a_preset_or_shorthand_is_accepted(
    client: TestClient, trace_file: Path, probe: FileProbe, name: str
) -> None:
    alice = auth(client, "alice", "vision")
    trace = upload_trace(client, alice, trace_file)
    body = {"trace_ids": [trace["id"]], "policies": ["fifo"], "clusters": [name]}
    r = client.post(f"{REPLAYS}/sweeps", json=body, headers=alice)
    assert r.status_code == 202, r.text
    assert [x["cluster"] for x in r.json()["replays"]] == [name]
