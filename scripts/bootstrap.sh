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

# Every install goes through requirements/lock.txt, which pins every package of every profile
# (base: the app; test: + the test tools; bench: + the baselines). scripts/lock.sh rewrites it.
LOCK="$ROOT/requirements/lock.txt"

uv_source_args() {  # pip's configured indexes / wheel folders / constraints, repeated for uv
  "${PYTHON_FOR_PIP_CONFIG:-$VENV/bin/python}" "$ROOT/scripts/uv_args.py"
}

ensure_uv() {  # the uv version the lock pins, inside .venv; falls back to pip when it cannot be had
  local want
  want="$(sed -n 's/^uv==\([^ ]*\).*/\1/p' "$LOCK" | head -1)"
  if [ -x "$VENV/bin/uv" ] && [ "$("$VENV/bin/uv" --version | cut -d' ' -f2)" = "$want" ]; then return 0; fi
  "$VENV/bin/python" -m pip install -qq "uv${want:+==$want}" 2>/dev/null
}

install_profile() {  # install requirements/<profile>.txt at the lock's versions
  local reqs="$1" src=()
  mapfile -t src < <(uv_source_args)
  if ensure_uv; then
    VIRTUAL_ENV="$VENV" "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" "${src[@]}" \
      -r "$ROOT/requirements/$reqs.txt" -c "$LOCK"
  else
    echo "    (uv unavailable: installing with pip, which takes a few minutes)" >&2
    "$VENV/bin/python" -m pip install -q -c "$LOCK" -r "$ROOT/requirements/$reqs.txt"
  fi
}

bootstrap_venv() {
  local reqs="$1"   # base, test or bench
  local stamp="$VENV/.install-stamp-$reqs"
  local want
  want="$(cat "$ROOT"/requirements/*.txt | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtual environment in .venv ($($PY --version))"
    "$PY" -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> installing requirements/$reqs.txt at the versions in requirements/lock.txt"
    install_profile "$reqs"
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
