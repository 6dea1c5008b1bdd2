"""A small Python client for the gpuflow API, used by `gpuflow submit/jobs/cancel`.

client = Client("http://127.0.0.1:8000", token)
job = client.submit_job({"num_gpus": 2, "duration_s": 600, "model": "bert"})
client.cancel_job(job["id"])
"""

from __future__ import annotations

from typing import Any

import httpx

API = "/api/v1"


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
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ClientError(response.status_code, detail)
        return None if response.status_code == 204 else response.json()

    def submit_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/jobs", json=spec)
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
