# Sourced by scripts/test: the browser tests drive the system Chromium (never a downloaded one).
# When it is missing, install Debian's `chromium` package where that is possible without asking
# (root, or CI with password-less sudo); otherwise the browser tests skip and say why.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  apt_run=""
  if [ "$(id -u)" = 0 ]; then
    apt_run="env"
  elif [ -n "${CI:-}" ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    apt_run="sudo -n env"
  fi
  if [ -n "$apt_run" ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium not found; installing it (apt-get) for the browser tests" >&2
    ($apt_run DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && $apt_run DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 \
      || echo "chromium could not be installed: the browser tests will be skipped." >&2
  else
    echo "chromium not found and not installable here (needs root or CI with sudo): the browser tests will be skipped." >&2
  fi
fi
