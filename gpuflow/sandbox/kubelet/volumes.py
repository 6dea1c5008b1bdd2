"""A pod's volumes as host directories, for the sandbox's ProcessKubelet (kubelet.py).

A process cannot see a container's mount paths, so each volume becomes a directory
on the host and kubelet.py rewrites env values that point into a mountPath
(`Mounts.rewrite`). Where each kind goes:

- emptyDir: `<pod dir>/volumes/<name>`, removed with the pod's directory;
- downwardAPI: `<pod dir>/volumes/<name>`, one file per item rendered as the real
  kubelet does (`render_field`), rewritten when the pod's metadata changes;
- projected: one file per item of its sources, written when the pod starts: the
  downwardAPI ones as above (rewritten with the metadata), a `serviceAccountToken`
  from the API server's TokenRequest API bound to the pod (`Projections.token`, the
  kubelet's, with its node's credentials as a real kubelet asks), `configMap` and
  `secret` items from the API server. The ServiceAccount admission plugin's
  `kube-api-access-*` volume so becomes token, ca.crt and namespace, as in a real pod;
  without `Projections` (a caller with no API server) only the downwardAPI items are
  written. A source that cannot be read (a required ConfigMap missing, a refused
  TokenRequest) is a VolumeError: the kubelet keeps the pod waiting and retries.
  The token is not refreshed: the API server extends a kubelet's default
  one-hour tokens to a year (--service-account-extend-token-expiration);
- persistentVolumeClaim: `<sandbox>/pvc/<namespace>/<claimName>`, shared by every pod
  that names the claim and kept across pod restarts (a checkpoint survives);
- hostPath: `<sandbox>/hostpath/<path>`, never the real host path;
- anything else (configMap, secret, csi, ...): an empty directory, with a warning
  logged; not emulated.
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# (kind "secrets"|"configmaps", namespace, name) -> the object, or None if missing.
Lookup = Callable[[str, str, str], Obj | None]
# (pod, audience or None, expirationSeconds) -> a token for the pod's ServiceAccount.
TokenSource = Callable[[Obj, str | None, int], str]
DEFAULT_TOKEN_EXPIRATION_S = 3600  # a projected token source's default


class VolumeError(RuntimeError):
    """A volume's source cannot be read: the pod cannot start yet."""


@dataclass(frozen=True)
class Projections:
    """Where a projected volume's API sources come from (the kubelet's credentials)."""

    lookup: Lookup
    token: TokenSource


def go_quote(text: str) -> str:
    """`text` as Go's `%q` (strconv.Quote) writes it: double quotes, `\\"` `\\\\`, the
    C escapes for control characters, `\\xNN` for other bytes below 0x20 and DEL,
    `\\uNNNN` for non-printable code points; printable Unicode kept as it is."""
    out = ['"']
    escapes = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f"}
    escapes.update({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"})
    for ch in text:
        code = ord(ch)
        if ch in escapes:
            out.append(escapes[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x80 or ch.isprintable():
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def format_map(items: Mapping[str, str]) -> str:
    """The kubelet's downward-API rendering of labels and annotations
    (k8s.io/kubernetes pkg/fieldpath FormatMap): `key="value"` lines sorted by key,
    the value quoted with Go's %q, no newline after the last."""
    return "\n".join(f"{k}={go_quote(items[k])}" for k in sorted(items))


def render_field(pod: Obj, field_path: str) -> str:
    """One downward-API file's content for a `fieldRef.fieldPath`."""
    meta = pod.get("metadata") or {}
    if field_path == "metadata.annotations":
        return format_map(meta.get("annotations") or {})
    if field_path == "metadata.labels":
        return format_map(meta.get("labels") or {})
    for prefix, key in (("metadata.annotations", "annotations"), ("metadata.labels", "labels")):
        if field_path.startswith(prefix + "['") and field_path.endswith("']"):
            return str((meta.get(key) or {}).get(field_path[len(prefix) + 2 : -2], ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
    }
    return str(simple.get(field_path) or "")


def object_data(obj: Obj) -> dict[str, str]:
    """A Secret's or ConfigMap's values as text (a Secret's `data` is base64)."""
    out = {str(k): str(v) for k, v in (obj.get("stringData") or {}).items()}
    if obj.get("kind") == "Secret":
        for k, v in (obj.get("data") or {}).items():
            out.setdefault(str(k), base64.b64decode(str(v)).decode("utf-8", "replace"))
    else:
        out.update({str(k): str(v) for k, v in (obj.get("data") or {}).items()})
    return out


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` at once, so that a reader never sees half a file (the real
    kubelet swaps a `..data` symlink for the same reason)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


@dataclass(frozen=True)
class Mounts:
    """Where a container's mount paths are on the host: (mountPath, host dir) pairs."""

    pairs: tuple[tuple[str, Path], ...]

    def rewrite(self, value: str) -> str:
        """`value` with a leading mountPath (the longest that matches, on a path
        boundary) replaced by its host directory; other values unchanged."""
        best: tuple[str, Path] | None = None
        for mount, host in self.pairs:
            root = mount.rstrip("/") or "/"
            inside = value == root or value.startswith(root.rstrip("/") + "/")
            if inside and (best is None or len(root) > len(best[0])):
                best = (root, host)
        if best is None:
            return value
        rest = value[len(best[0]) :].lstrip("/")
        return str(best[1] / rest) if rest else str(best[1])


class PodVolumes:
    """The host directories of one pod's volumes."""

    def __init__(
        self, sandbox_dir: Path, pod_dir: Path, pod: Obj, projections: Projections | None = None
    ) -> None:
        self.sandbox_dir = sandbox_dir
        self.pod_dir = pod_dir
        self.projections = projections
        self.dirs: dict[str, Path] = {}
        self._downward: dict[str, list[Obj]] = {}  # volume name -> items
        ns = (pod.get("metadata") or {}).get("namespace", "default")
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            self.dirs[volume["name"]] = self._materialise(ns, volume)
            if "projected" in volume and projections is not None:
                self._write_api_sources(pod, self.dirs[volume["name"]], volume["projected"])
        self.refresh(pod)

    def _materialise(self, ns: str, volume: Obj) -> Path:
        name = volume["name"]
        if "persistentVolumeClaim" in volume:
            claim = str(volume["persistentVolumeClaim"].get("claimName", name))
            path = self.sandbox_dir / "pvc" / ns / claim
        elif "hostPath" in volume:
            host = str(volume["hostPath"].get("path", name)).strip("/")
            path = self.sandbox_dir / "hostpath" / host
        else:
            path = self.pod_dir / "volumes" / name
            if "downwardAPI" in volume:
                self._downward[name] = list(volume["downwardAPI"].get("items") or [])
            elif "projected" in volume:
                self._project(name, volume["projected"])
            elif "emptyDir" not in volume:
                kinds = ", ".join(k for k in volume if k != "name")
                log.warning("volume not emulated name=%s kind=%s: an empty directory", name, kinds)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _project(self, name: str, projected: Obj) -> None:
        """A projected volume's downwardAPI items, (re)written by refresh()."""
        sources: list[Obj] = projected.get("sources") or []
        items = [i for src in sources for i in (src.get("downwardAPI") or {}).get("items") or []]
        self._downward[name] = items

    def _write_api_sources(self, pod: Obj, path: Path, projected: Obj) -> None:
        """A projected volume's token, configMap and secret items, read now."""
        assert self.projections is not None
        ns = str((pod.get("metadata") or {}).get("namespace", "default"))
        for src in projected.get("sources") or []:
            if "serviceAccountToken" in src:
                spec = src["serviceAccountToken"]
                expiration_s = int(spec.get("expirationSeconds") or DEFAULT_TOKEN_EXPIRATION_S)
                token = self.projections.token(pod, spec.get("audience"), expiration_s)
                write_atomic(path / str(spec.get("path", "token")), token)
            for kind, key in (("configmaps", "configMap"), ("secrets", "secret")):
                if key in src:
                    self._write_object_items(ns, kind, src[key], path)

    def _write_object_items(self, ns: str, kind: str, ref: Obj, path: Path) -> None:
        """A configMap or secret source's items (all keys when it names none)."""
        assert self.projections is not None
        obj = self.projections.lookup(kind, ns, str(ref.get("name", "")))
        if obj is None:
            if ref.get("optional"):
                return
            raise VolumeError(f'{kind[:-1]} "{ref.get("name")}" not found')
        data = object_data(obj)
        items = ref.get("items") or [{"key": k, "path": k} for k in sorted(data)]
        for item in items:
            key = str(item.get("key", ""))
            if key not in data:
                if ref.get("optional"):
                    continue
                raise VolumeError(f'{kind[:-1]} "{ref.get("name")}" has no key "{key}"')
            write_atomic(path / str(item.get("path", key)), data[key])

    def refresh(self, pod: Obj) -> None:
        """(Re)write the downward-API files from the pod's current metadata; a file
        whose content is unchanged is left alone."""
        for name, items in self._downward.items():
            for item in items:
                ref = (item.get("fieldRef") or {}).get("fieldPath")
                if not ref or not item.get("path"):
                    continue  # resourceFieldRef is not emulated
                path = self.dirs[name] / str(item["path"])
                text = render_field(pod, str(ref))
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    write_atomic(path, text)

    def mounts(self, container: Obj) -> Mounts:
        pairs = []
        for m in container.get("volumeMounts") or []:
            host = self.dirs.get(m.get("name", ""))
            if host is not None and m.get("mountPath"):
                sub = str(m.get("subPath") or "")
                pairs.append((str(m["mountPath"]), host / sub if sub else host))
        return Mounts(tuple(pairs))
