# Sourced by ./run and ./test: make sure .venv exists and matches requirements/*.txt.
# A second run with unchanged requirements costs a hash comparison, not a reinstall.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY="$candidate"; break; fi
  done
fi

bootstrap_venv() {
  local reqs="$1"   # base or test
  local stamp="$VENV/.install-stamp-$reqs"
  local want
  want="$(cat "$ROOT"/requirements/*.txt | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtual environment in .venv ($($PY --version))"
    "$PY" -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> installing requirements/$reqs.txt (first run takes a minute or two)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # The constraints pin torch to the CPU build and stop pip's kombu backtracking trap.
    "$VENV/bin/python" -m pip install -q -c "$ROOT/requirements/constraints.txt" -r "$ROOT/requirements/$reqs.txt"
    echo "$want" > "$stamp"
  fi
}

ensure_apt_packages() {
  # Install Debian packages only when missing (tests need bwrap for the sandbox, chromium for
  # the browser suite, docker-compose to validate the compose file).
  local missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      echo "==> apt-get install ${missing[*]}"
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "warning: missing ${missing[*]} (install with apt-get); the tests that need them will be skipped" >&2
    fi
  fi
}
