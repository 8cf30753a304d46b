# lib.sh - process helpers shared by start-slurm.sh and stop-slurm.sh (source it; needs log()).
# Processes are found only through pid files and checked by /proc/PID/comm; nothing by name.

# proc_is PID COMM -> 0 if PID is a live (non-zombie) process whose /proc/PID/comm is COMM
proc_is() {
  [[ -n $1 && -r /proc/$1/comm ]] || return 1
  [[ $(<"/proc/$1/comm") == "$2" ]] 2>/dev/null || return 1
  local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $st != Z && $st != X ]]
}

# pid_alive PIDFILE COMM -> 0 if the pid in PIDFILE is a live process named COMM
pid_alive() {
  local f=$1 name=$2 pid
  [[ -s $f ]] || return 1
  pid=$(<"$f"); pid=${pid//[^0-9]/}
  proc_is "$pid" "$name"
}

# stop_pidfile PIDFILE COMM -> TERM (then KILL after 15s) the process named in PIDFILE only
stop_pidfile() {
  local f=$1 name=$2 pid i
  if ! pid_alive "$f" "$name"; then log "$name not running"; rm -f "$f"; return 0; fi
  pid=$(<"$f"); pid=${pid//[^0-9]/}
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 150); do proc_is "$pid" "$name" || break; sleep 0.1; done
  if proc_is "$pid" "$name"; then log "$name did not exit after 15s, sending KILL"; kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; fi
  rm -f "$f"
}
