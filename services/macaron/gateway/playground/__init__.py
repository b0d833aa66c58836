"""The playground: a page at `GET /` that chats through the gateway's own API and shows each route.

The page (`static/`) is plain HTML, CSS and JavaScript; it calls `/v1/chat/completions`,
`/v1/models` and `/stats` with the key the person types in, like any client, and loads nothing
from outside. `ui` answers are drawn by the official A2UI web renderer (npm `@a2ui/lit`), which
the set-up (`scripts/bootstrap.sh`) installs from `web/package-lock.json` and bundles into
`web/dist/`; the gateway serves that file. Without it (no npm) the page still works and says the
renderer is missing, showing `ui` answers as JSON only.

The page and its assets need no key (a browser cannot send one when it navigates); they hold
nothing secret, and every figure or answer they show comes from an authenticated API call.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse
from starlette.staticfiles import StaticFiles

from macaron.gateway.errors import GatewayError

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
RENDERER_DIR = HERE / "web" / "dist"
RENDERER_FILE = "a2ui-renderer.js"
RENDERER_FILES = {RENDERER_FILE: "text/javascript", RENDERER_FILE + ".LEGAL.txt": "text/plain"}
"""What the bundle folder may serve (the bundle and its licence notices), with their media types."""


def renderer_built() -> bool:
    """True when the set-up built the A2UI renderer bundle."""
    return (RENDERER_DIR / RENDERER_FILE).is_file()


def mount_playground(app: FastAPI) -> None:
    """`GET /` (the page), `/playground/static/*` (its script and style), `/playground/renderer/*` (the bundle)."""
    renderer_dir = RENDERER_DIR  # read at mount time, so tests can point it elsewhere

    @app.get("/", include_in_schema=False)
    async def playground_page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers={"cache-control": "no-cache"})

    @app.get("/playground/renderer/{name}", include_in_schema=False)
    async def playground_renderer(name: str) -> FileResponse:
        path = renderer_dir / name
        if name not in RENDERER_FILES or not path.is_file():
            raise GatewayError(404, f"{name} is not here: the A2UI renderer is built by scripts/bootstrap.sh, "
                               "which needs node and npm", type="not_found_error", code="renderer_not_built")
        return FileResponse(path, media_type=RENDERER_FILES[name], headers={"cache-control": "no-cache"})

    app.mount("/playground/static", StaticFiles(directory=STATIC_DIR), name="playground-static")


__all__ = ["RENDERER_DIR", "STATIC_DIR", "mount_playground", "renderer_built"]
