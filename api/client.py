"""A small Python client for the gpuflow API, used by `gpuflow submit/jobs/cancel`.

client = Client("http://127.0.0.1:8000", token)
job = client.submit_job({"num_gpus": 2, "duration_s": 600, "model": "bert"})
client.cancel_job(job["id"])

`submit_job` sends an `Idempotency-Key` and, if the answer is lost (a timeout, a
dropped connection) or is a 503, sends the request once more with the same key: the
server answers the retry as the first request, so a job is never submitted twice.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

import httpx

API = "/api/v1"
# The longest wait before a submission's retry: the server's Retry-After (5 s on a
# database or broker 503) is honoured up to this; 1 s when it gives none.
RETRY_WAIT_MAX_S = 5.0


class ClientError(Exception):
    """The server refused the request (status and its detail) or could not be reached."""

    def __init__(self, status: int | None, detail: object) -> None:
        self.status = status
        self.detail = detail
        where = "cannot reach the server" if status is None else f"HTTP {status}"
        super().__init__(f"{where}: {detail}")


class Client:
    def __init__(self, url: str, token: str | None, timeout_s: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, API + path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(None, str(exc) or type(exc).__name__) from None
        return _answer(response)

    def _call_once(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` under a new Idempotency-Key; sent again once, with the same key,
        if no answer came back or the answer was a 503."""
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        try:
            response = self._http.post(API + path, json=body, headers=headers)
            if response.status_code != 503:
                return _answer(response)
            wait_s = _retry_after_s(response)
        except httpx.TransportError:
            wait_s = 1.0
        time.sleep(wait_s)
        return self._call("POST", path, json=body, headers=headers)

    def submit_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a job, at most once however the first attempt ended (module doc)."""
        result: dict[str, Any] = self._call_once("/jobs", spec)
        return result

    def list_jobs(self, *, status: str | None = None, limit: int = 100) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        result: dict[str, Any] = self._call("GET", "/jobs", params=params)
        return result

    def get_job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/jobs/{job_id}")
        return result

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/jobs/{job_id}/cancel")
        return result

    def job_events(self, job_id: str) -> list[dict[str, Any]]:
        result: dict[str, Any] = self._call("GET", f"/jobs/{job_id}/events")
        data: list[dict[str, Any]] = result["data"]
        return data


def _answer(response: httpx.Response) -> Any:
    """The answer's JSON; ClientError with the status and detail of a refusal."""
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise ClientError(response.status_code, detail)
    return None if response.status_code == 204 else response.json()


def _retry_after_s(response: httpx.Response) -> float:
    try:
        wait_s = float(response.headers.get("Retry-After", "1"))
    except ValueError:
        wait_s = 1.0
    return min(max(wait_s, 0.0), RETRY_WAIT_MAX_S) if math.isfinite(wait_s) else 1.0
