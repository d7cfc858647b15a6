#!/usr/bin/env bash
# Re-resolve requirements/{base,test,bench,smollm2}.txt (+ requirements/constraints.txt) into requirements/lock.txt,
# the one file that pins every package for ./run, ./test, CI and docker/Dockerfile.
#   scripts/lock.sh              # keep the current pins, add/drop what the requirement files changed
#   scripts/lock.sh --upgrade    # re-resolve everything to the newest allowed versions
#   scripts/lock.sh --upgrade-package transformers   # (any `uv pip compile` option passes through)
# The lock is for CPython 3.11 on Linux x86_64 with glibc 2.36 (Debian 12, as the python:3.11-slim-bookworm
# image). torch is the CPU build (+cpu): it comes from a wheel folder/index pip is configured with, or, in the image,
# from https://download.pytorch.org/whl/cpu. UV_BIN=/path/to/uv uses that uv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh
if [ -n "${UV_BIN:-}" ]; then UV="$UV_BIN"; else
  ensure_uv || { echo "cannot get uv (pip install uv)" >&2; exit 1; }
fi
mapfile -t src < <(uv_source_args)
"$UV" pip compile -q --python-version 3.11 --python-platform x86_64-manylinux_2_36 "${src[@]}" \
  --custom-compile-command "scripts/lock.sh" \
  -c requirements/constraints.txt --overrides requirements/overrides.txt \
  requirements/test.txt requirements/bench.txt requirements/smollm2.txt \
  -o requirements/lock.txt "$@"
# The machine's own constraint files appear in "# via -c <path>" notes: keep their paths out of the repository.
sed -i -E 's#-c /[^ ]+#-c (pip.conf constraint)#' requirements/lock.txt
rm -rf "$VENV/.uv-bootstrap"
echo "requirements/lock.txt: $(grep -c '^[A-Za-z0-9].*==' requirements/lock.txt) packages pinned"
