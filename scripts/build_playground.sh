#!/usr/bin/env bash
# Installs the playground's A2UI web renderer (npm `@a2ui/lit`, pinned by web/package-lock.json)
# and bundles it into web/dist/ for the gateway to serve. Called by scripts/bootstrap.sh.
# Idempotent (a stamp of the inputs skips a second build). Never fatal: without node/npm, or
# when npm fails, the playground page still works and says that the renderer is missing.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
web="$root/services/macaron/gateway/playground/web"
cd "$web" || exit 0
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "note: node/npm not found; the playground at GET / works without the A2UI renderer (ui answers shown as JSON)." >&2
  echo "      Install node 20 and npm, then run scripts/bootstrap.sh again to add it." >&2
  exit 0
fi
want="$(cat package.json package-lock.json src/*.js | sha256sum | cut -d' ' -f1)"
if [ -f dist/a2ui-renderer.js ] && [ "$(cat dist/.stamp 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "building the playground's A2UI renderer (npm ci, esbuild)" >&2
if npm ci --no-audit --no-fund --loglevel=error >/dev/null && npm run --silent build >/dev/null; then
  echo "$want" > dist/.stamp
else
  echo "warning: the A2UI renderer could not be installed or built (see the npm output above);" >&2
  echo "         the playground works without it and says so. Fix npm access, then rerun scripts/bootstrap.sh." >&2
fi
exit 0
