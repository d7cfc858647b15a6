# Sourced by ./run: `supervise NAME CMD...` keeps CMD running in its own process group (restarted with backoff
# when it exits) and stops it when the supervising subshell gets TERM or INT; `note` logs to supervisor.log.
# Needs VAR (the var folder) and the array `pids` (each supervisor's pid is appended).

note() { echo "$(date -u +%FT%TZ) $*" | tee -a "$VAR/logs/supervisor.log" >&2; }

supervise() {  # supervise NAME CMD...: keep CMD running in its own process group, logging to var/logs/NAME.log
  local name="$1"; shift
  (
    set +e
    child="" nap=""
    running() { case "$(ps -o stat= -p "$1" 2>/dev/null)" in ""|Z*) return 1 ;; esac; }  # gone, or a zombie
    stop_child() {
      [ -n "$nap" ] && kill "$nap" 2>/dev/null
      local pid="$child" tenths=0
      [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || return 0
      # What has not stopped after the grace period is killed, so that Ctrl-C always ends ./run: a Celery worker
      # stopped while it still looks for its neighbours (mingle) can hang in its warm shutdown. The app recovers
      # from a killed worker as it does when one dies (bench/soak.py kills one mid-run). Until it is reaped, the
      # exited child (a zombie) keeps its group's id from being reused.
      while running "$pid" && (( tenths++ < ${STOP_GRACE_S:-60} * 5 )); do sleep 0.2; done
      kill -KILL -- "-$pid" 2>/dev/null
      wait "$pid"
    }
    trap 'trap "" TERM INT; stop_child; exit 0' TERM INT
    delay=1
    while :; do
      started=$SECONDS
      setsid "$@" >>"$VAR/logs/$name.log" 2>&1 &
      child=$!
      wait "$child"; rc=$?; child=""
      # Backoff doubles up to 30 s while it keeps failing; a run of a minute or more starts it over.
      if (( SECONDS - started >= 60 )); then delay=1; fi
      note "$name exited (status $rc); restarting in ${delay}s"
      sleep "$delay" & nap=$!; wait "$nap"; nap=""
      delay=$(( delay * 2 > 30 ? 30 : delay * 2 ))
    done
  ) &
  pids+=("$!")
}
