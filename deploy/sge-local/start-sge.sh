#!/usr/bin/env bash
# start-sge.sh - start a REAL one-node Grid Engine (Debian's gridengine 8.1.9: qmaster + execd) on
# this machine, for tests/run as SLURM's start-slurm.sh is (no systemd, no Docker). Must run as root.
#
# Idempotent: installs gridengine-master, -exec and -client if missing (preseeded: this host is the
# master, configured by the package), then only what is not there yet: the host alias that keeps
# the loopback address from resolving to "localhost" (qmaster would refuse its own client), jobs
# as root allowed (min_uid/min_gid 0: CI runs as root), this host as submit and exec host, the
# @allhosts group and the all.q queue (SGE_LOCAL_SLOTS slots, default 8); starts sge_qmaster and
# sge_execd if they are not running. Prints `qstat -f` at the end.
#   SGE_LOCAL_NO_INSTALL=1   never call apt-get
set -euo pipefail

export SGE_ROOT=${SGE_ROOT:-/var/lib/gridengine} SGE_CELL=${SGE_CELL:-default}
SLOTS=${SGE_LOCAL_SLOTS:-8}
HOST=$(hostname)
COMMON=$SGE_ROOT/$SGE_CELL/common
PKGS=(gridengine-master gridengine-exec gridengine-client)

log() { echo "[start-sge] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root"

if ! command -v qconf >/dev/null || [[ ! -d $COMMON ]]; then
  [[ ${SGE_LOCAL_NO_INSTALL:-} == 1 ]] && die "gridengine is not installed"
  for p in gridengine-common gridengine-client gridengine-master; do
    printf '%s shared/gridenginemaster string %s\n%s shared/gridengineconfig boolean true\n%s shared/gridenginecell string %s\n' \
      "$p" "$HOST" "$p" "$p" "$SGE_CELL"
  done | debconf-set-selections
  apt-cache policy gridengine-master 2>/dev/null | grep -q 'Candidate: [0-9]' || apt-get update -qq
  log "installing ${PKGS[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
fi
[[ -d $COMMON ]] || die "$COMMON missing after install (the package did not configure a cell)"

# the host name resolves to 127.0.0.1, which resolves back to "localhost": one name for both
grep -qxF "$HOST localhost" "$COMMON/host_aliases" 2>/dev/null || echo "$HOST localhost" >> "$COMMON/host_aliases"
echo "$HOST" > "$COMMON/act_qmaster"

running() { pgrep -x "$1" >/dev/null; }
if ! running sge_qmaster; then
  log "starting sge_qmaster"
  /etc/init.d/gridengine-master start >/dev/null 2>&1 || /usr/sbin/sge_qmaster
  for _ in $(seq 30); do qconf -sh >/dev/null 2>&1 && break; sleep 1; done
fi
qconf -sh >/dev/null 2>&1 || die "sge_qmaster does not answer (see /var/spool/gridengine/qmaster/messages)"

T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
if ! qconf -sconf | grep -qE '^min_uid +0$'; then
  qconf -sconf > "$T/global"
  sed -i -E 's/^(min_uid +).*/\10/; s/^(min_gid +).*/\10/' "$T/global"
  qconf -Mconf "$T/global" >/dev/null
fi
qconf -ss 2>/dev/null | grep -qxF "$HOST" || qconf -as "$HOST" >/dev/null
qconf -sh 2>/dev/null | grep -qxF "$HOST" || qconf -ah "$HOST" >/dev/null
if ! qconf -sel 2>/dev/null | grep -qxF "$HOST"; then
  printf 'hostname %s\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\nxuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\nreport_variables NONE\n' "$HOST" > "$T/exec"
  qconf -Ae "$T/exec" >/dev/null
fi
if ! qconf -shgrpl 2>/dev/null | grep -qxF "@allhosts"; then
  printf 'group_name @allhosts\nhostlist %s\n' "$HOST" > "$T/hgrp"
  qconf -Ahgrp "$T/hgrp" >/dev/null
fi
if ! qconf -sql 2>/dev/null | grep -qxF "all.q"; then
  {
    printf 'qname all.q\nhostlist @allhosts\nseq_no 0\nload_thresholds NONE\nsuspend_thresholds NONE\n'
    printf 'nsuspend 1\nsuspend_interval 00:05:00\npriority 0\nmin_cpu_interval 00:05:00\nprocessors UNDEFINED\n'
    printf 'qtype BATCH INTERACTIVE\nckpt_list NONE\npe_list NONE\nrerun FALSE\nslots %s\ntmpdir /tmp\nshell /bin/bash\n' "$SLOTS"
    printf 'prolog NONE\nepilog NONE\nshell_start_mode unix_behavior\nstarter_method NONE\nsuspend_method NONE\n'
    printf 'resume_method NONE\nterminate_method NONE\nnotify 00:00:60\nowner_list NONE\nuser_lists NONE\n'
    printf 'xuser_lists NONE\nsubordinate_list NONE\ncomplex_values NONE\nprojects NONE\nxprojects NONE\n'
    printf 'calendar NONE\ninitial_state default\n'
    for l in rt cpu fsize data stack core rss vmem; do printf 's_%s INFINITY\nh_%s INFINITY\n' "$l" "$l"; done
  } > "$T/queue"
  qconf -Aq "$T/queue" >/dev/null
fi
if ! running sge_execd; then
  log "starting sge_execd"
  /etc/init.d/gridengine-exec start >/dev/null 2>&1 || /usr/sbin/sge_execd
fi
for _ in $(seq 30); do
  qstat -f 2>/dev/null | grep -q "all.q@" && ! qstat -f | grep "all.q@" | grep -qE ' (au|u|E)$' && break
  sleep 1
done
qstat -f >&2
