"""Downward-API rendering as the real kubelet writes it, and mount-path rewriting."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuflow.sandbox.kubelet.podenv import expand, rewrite_dns
from gpuflow.sandbox.kubelet.volumes import Mounts, format_map, go_quote


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("64", '"64"'),
        ('a "b"\\c', '"a \\"b\\"\\\\c"'),
        ("tab\there\nnl", '"tab\\there\\nnl"'),
        ("\x01\x7f", '"\\x01\\x7f"'),
        ("héllo ✓", '"héllo ✓"'),
        ("\u200b", '"\\u200b"'),
    ],
)
def test_go_quote_matches_strconv_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_format_map_sorted_key_equals_quoted_value_no_trailing_newline() -> None:
    text = format_map({"b": "2", "a/x": 'say "hi"'})
    assert text == 'a/x="say \\"hi\\""\nb="2"'


def test_mount_rewrite_longest_prefix_on_path_boundary() -> None:
    m = Mounts((("/ckpt", Path("/h/pvc")), ("/ckpt/deep", Path("/h/deep"))))
    assert m.rewrite("/ckpt/j1/model.pt") == "/h/pvc/j1/model.pt"
    assert m.rewrite("/ckpt/deep/x") == "/h/deep/x"
    assert m.rewrite("/ckpt") == "/h/pvc"
    assert m.rewrite("/ckptx/a") == "/ckptx/a"
    assert m.rewrite("relative") == "relative"


def test_env_expansion_and_dns_rewrite() -> None:
    assert expand("$(A)-$(B)-$$(A)", {"A": "1"}) == "1-$(B)-$(A)"
    ips = {("default", "j-1-0"): "10.0.0.10"}
    resolve = lambda ns, pod: ips.get((ns, pod))  # noqa: E731
    assert rewrite_dns("j-1-0.j.default.svc", "default", resolve) == "10.0.0.10"
    assert rewrite_dns("j-1-0.j.default.svc.cluster.local", "x", resolve) == "10.0.0.10"
    assert rewrite_dns("example.com", "default", resolve) == "example.com"
