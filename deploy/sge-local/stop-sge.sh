#!/usr/bin/env bash
# stop-sge.sh - stop the one-node Grid Engine that start-sge.sh started: deletes the jobs left in
# its queue, then asks sge_execd and sge_qmaster to shut down through Grid Engine's own client
# (qconf -ke, qconf -km) and waits for them to exit. Nothing is killed by name. Idempotent: a no-op
# when Grid Engine is not running. Must run as root.
set -uo pipefail
export SGE_ROOT=${SGE_ROOT:-/var/lib/gridengine} SGE_CELL=${SGE_CELL:-default}
log() { echo "[stop-sge] $*" >&2; }

if ! command -v qconf >/dev/null || ! qconf -sh >/dev/null 2>&1; then
  log "Grid Engine is not running"; exit 0
fi
qdel -u '*' >/dev/null 2>&1 || true
log "stopping sge_execd and sge_qmaster"
qconf -ke all >/dev/null 2>&1 || true
sleep 1
qconf -km >/dev/null 2>&1 || true
for _ in $(seq 150); do
  pgrep -x sge_qmaster >/dev/null || pgrep -x sge_execd >/dev/null || exit 0
  sleep 0.1
done
log "Grid Engine did not stop within 15 s"
exit 1
