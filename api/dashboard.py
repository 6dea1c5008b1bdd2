"""The web dashboard and the API docs, served from files inside the package.

`install(app)` is called by `api.app.create_app`: it mounts the dashboard's source
(`web/src/`, the `web` package's data, found through importlib.resources so that an
installed wheel serves what a checkout does) at `/static/dashboard` and `api/static/`
at `/static`, answers `/` with the dashboard's HTML shell (the page then signs in with
a token and reads the REST API from the browser), and serves Swagger UI at `/docs`
and ReDoc at `/redoc` from the vendored copies under `api/static/vendor/` (versions
and sources in its README), so that no page the service serves contacts another host.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
STATIC_URL = "/static"
DASHBOARD_URL = f"{STATIC_URL}/dashboard"
VENDOR_URL = f"{STATIC_URL}/vendor"
# Swagger UI would otherwise ask validator.swagger.io to check the document.
SWAGGER_PARAMETERS = {"validatorUrl": None}


def dashboard_dir() -> Path:
    """The folder of the dashboard's files: `web/src/` in a checkout or a wheel."""
    return Path(str(files("web") / "src"))


def install(app: FastAPI) -> None:
    """Mount the static files and add `/`, `/docs` and `/redoc` (hidden from the schema)."""
    dashboard_files = dashboard_dir()
    # The longer prefix first: Starlette tries mounts in order.
    app.mount(DASHBOARD_URL, StaticFiles(directory=dashboard_files), name="dashboard")
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
    title = app.title
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(dashboard_files / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{VENDOR_URL}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{VENDOR_URL}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{VENDOR_URL}/swagger-ui/favicon-32x32.png",
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{VENDOR_URL}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{VENDOR_URL}/swagger-ui/favicon-32x32.png",
            with_google_fonts=False,
        )
