#!/usr/bin/env bash
# Time to first curve: from a clean clone, `./run` until the demo GRPO reward curve is above 0.4.
#
#   bench/time_to_first_curve.sh            # clones HEAD of this repository (committed work only)
#   TTFC_WORKTREE=1 bench/time_to_first_curve.sh   # copies the working tree instead (uncommitted work too)
#
# (a) install included: a clone with no .venv; `./run` (install, migrate, seed the demo, start web +
#     worker + beat) until /healthz answers, then `manage.py launch_job --project demo --kind grpo
#     --preset demo-cpu`, then until the last 10 logged steps of critic/score/mean (as ingested into
#     the database the run page reads) average above 0.4. One continuous stopwatch.
# (b) install excluded: everything is stopped, `./run` starts again (nothing to install) until
#     /healthz answers; that start-up plus the same launch-to-curve time of (a).
# Prints both totals split by phase (install: .venv created and requirements installed, until the install
# stamp appears; database: migrate + seed_demo with the demo model builds, until seed_demo reports; serve:
# web/worker/beat start until /healthz answers; curve: launch_job until the curve passes), stops every
# process it started and removes the clone (TTFC_KEEP=1 keeps it). The uv cache (~/.cache/uv) is the
# machine's: a machine's first install downloads the wheels, later clones reuse them.
set -euo pipefail

SRC="$(cd "$(dirname "$0")/.." && pwd)"
PORT="${PORT:-8765}"
THRESHOLD="${TTFC_THRESHOLD:-0.4}"
WINDOW="${TTFC_WINDOW:-10}"
CURVE_TIMEOUT_S="${TTFC_CURVE_TIMEOUT_S:-900}"
START_TIMEOUT_S="${TTFC_START_TIMEOUT_S:-1200}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/ttfc.XXXXXX")"
CLONE="$TMP/clone"
RUN_PID=""

# The demo's defaults: SQLite and a filesystem broker inside the clone, nothing shared with this checkout.
unset DATABASE_URL REDIS_URL WORKBENCH_VAR_DIR RUNS_ROOT MODELS_ROOT CELERY_TASK_ALWAYS_EAGER
export PORT

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }

stop_run() {
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -TERM -- "-$RUN_PID" 2>/dev/null || true   # ./run's trap stops web, worker, beat and training runs
    for _ in $(seq 1 60); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$RUN_PID" 2>/dev/null || true
  fi
  RUN_PID=""
}
finish() {
  stop_run
  if [ "${TTFC_KEEP:-0}" = "1" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

start_run() {  # start ./run as the leader of its own session (so $! is its process group); log to $TMP/run-<n>.log
  setsid bash -c 'cd "$1" && exec ./run' _ "$CLONE" >"$TMP/run-$1.log" 2>&1 &
  RUN_PID=$!
}

healthz() { python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=2)" 2>/dev/null; }

port_free() {  # a server left over (or someone else's) would answer for the next start: refuse to measure
  for _ in $(seq 1 60); do healthz || return 0; sleep 0.5; done
  echo "something still answers on port $PORT; set PORT to a free port" >&2
  exit 1
}

T_INSTALLED=""; T_SEEDED=""
wait_healthz() {  # also notes when the install finished and when seed_demo reported (phase times)
  local deadline=$(( $(date +%s) + START_TIMEOUT_S ))
  T_INSTALLED=""; T_SEEDED=""
  until healthz; do
    if [ -z "$T_INSTALLED" ] && [ -f "$CLONE/.venv/.install-stamp-base" ]; then T_INSTALLED=$(now); fi
    if [ -z "$T_SEEDED" ] && grep -q "^Demo project .* ready" "$TMP/run-$1.log" 2>/dev/null; then
      T_SEEDED=$(now); [ -n "$T_INSTALLED" ] || T_INSTALLED=$T_SEEDED
    fi
    if ! kill -0 "$RUN_PID" 2>/dev/null; then echo "./run exited; its log:" >&2; tail -40 "$TMP/run-$1.log" >&2; exit 1; fi
    if [ "$(date +%s)" -gt "$deadline" ]; then echo "no /healthz after ${START_TIMEOUT_S}s" >&2; tail -40 "$TMP/run-$1.log" >&2; exit 1; fi
    sleep 0.2
  done
  [ -n "$T_SEEDED" ] || T_SEEDED=$(now)
  [ -n "$T_INSTALLED" ] || T_INSTALLED=$T_SEEDED
}

echo "==> cloning $SRC into $CLONE"
if [ "${TTFC_WORKTREE:-0}" = "1" ]; then
  mkdir -p "$CLONE"
  (cd "$SRC" && git ls-files -co --exclude-standard -z | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) \
    | tar -xf - -C "$CLONE"
else
  git clone -q "$SRC" "$CLONE"
fi
[ ! -e "$CLONE/.venv" ] || { echo "the clone has a .venv: not a clean clone" >&2; exit 1; }

# (a) install included ------------------------------------------------------------------------
echo "==> (a) ./run in a clean clone (installs .venv)"
port_free
T0=$(now)
start_run 1
wait_healthz 1
T_UP1=$(now)
INSTALL1=$(secs "$T0" "$T_INSTALLED"); DB1=$(secs "$T_INSTALLED" "$T_SEEDED"); SERVE1=$(secs "$T_SEEDED" "$T_UP1")
echo "    /healthz answers after $(secs "$T0" "$T_UP1") s (install $INSTALL1 s, database+demo $DB1 s, serve $SERVE1 s)"

LAUNCH_OUT="$(cd "$CLONE" && .venv/bin/python manage.py launch_job --project demo --kind grpo --preset demo-cpu --name time-to-first-curve)"
echo "    $LAUNCH_OUT"
JOB_ID="$(echo "$LAUNCH_OUT" | sed -n 's/.*Job #\([0-9]*\).*/\1/p' | head -1)"
[ -n "$JOB_ID" ] || { echo "could not read the job id" >&2; exit 1; }
T_LAUNCH=$(now)

# Poll the database the run page reads (metrics arrive through the beat's sync, as in the UI).
(cd "$CLONE" && .venv/bin/python - "$JOB_ID" "$THRESHOLD" "$WINDOW" "$CURVE_TIMEOUT_S" <<'PY'
import os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
import django
django.setup()
from webapp.runs.models import FINAL_STATES, Job, MetricPoint

job_id, threshold, window, timeout = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
deadline, first = time.time() + timeout, None
while time.time() < deadline:
    rows = list(MetricPoint.objects.filter(job_id=job_id, name="critic/score/mean").order_by("-step")
                .values_list("step", "value")[:window])
    if rows and first is None:
        first = rows[-1]
        print(f"    first point: step {first[0]}, critic/score/mean {first[1]:.3f}", flush=True)
    if len(rows) == window and sum(v for _, v in rows) / window > threshold:
        print(f"    step {rows[0][0]}: {window}-step mean of critic/score/mean = "
              f"{sum(v for _, v in rows) / window:.3f} > {threshold}", flush=True)
        sys.exit(0)
    job = Job.objects.get(pk=job_id)
    if job.state in FINAL_STATES:
        sys.exit(f"job #{job_id} ended ({job.state}) before the {window}-step mean passed {threshold}: {job.error}")
    time.sleep(0.5)
sys.exit(f"timed out after {timeout:.0f} s waiting for the reward curve")
PY
)
T_CURVE=$(now)
echo "    reward curve above $THRESHOLD $(secs "$T_LAUNCH" "$T_CURVE") s after launch_job returned"
stop_run

# (b) install excluded ------------------------------------------------------------------------
echo "==> (b) ./run again (nothing to install)"
port_free
T1=$(now)
start_run 2
wait_healthz 2
T_UP2=$(now)
DB2=$(secs "$T1" "$T_SEEDED"); SERVE2=$(secs "$T_SEEDED" "$T_UP2")
echo "    /healthz answers after $(secs "$T1" "$T_UP2") s (install check + database+demo $DB2 s, serve $SERVE2 s)"
stop_run

TRAIN=$(secs "$T_LAUNCH" "$T_CURVE")
LAUNCH=$(secs "$T_UP1" "$T_LAUNCH")
START2=$(secs "$T1" "$T_UP2")
cat <<REPORT

Time to first curve ($(nproc) CPU cores, $(uname -m), load average $(cut -d' ' -f1-3 /proc/loadavg), demo GRPO on preset demo-cpu, ${WINDOW}-step mean of critic/score/mean > $THRESHOLD)
  fresh clone:   ./run -> /healthz $(secs "$T0" "$T_UP1") s = install $INSTALL1 s + database+demo $DB1 s + serve $SERVE1 s
  second start:  ./run -> /healthz $START2 s = install check + database+demo $DB2 s + serve $SERVE2 s
  first curve:   launch_job $LAUNCH s + launch -> curve above $THRESHOLD $TRAIN s
  install included: $(secs "$T0" "$T_CURVE") s   install excluded: $(python3 -c "print(f'{$START2 + $LAUNCH + $TRAIN:.1f}')") s
REPORT
