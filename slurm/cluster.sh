#!/usr/bin/env bash
# A one-machine Slurm cluster: munge, MariaDB + slurmdbd (so that sacct answers), slurmctld and
# slurmd, all started from the configuration in this folder, with state and logs in .slurm/.
#
#   slurm/cluster.sh up       install the Debian packages when missing (root), start what is not running
#   slurm/cluster.sh down     stop everything it started (the state folder is kept)
#   slurm/cluster.sh status   one line: up or down, and why
#   slurm/cluster.sh env      the line to paste into a shell so that sbatch / squeue / sacct find it
#
# No systemd: each daemon is started directly, with its own pid file under .slurm/run. Both `up` and
# `down` are idempotent. One node with this machine's CPUs and memory; partitions `normal` (no time
# limit, the default) and `short` (TBT_SLURM_SHORT_MIN minutes, 2 by default); MaxArraySize
# TBT_SLURM_MAX_ARRAY_SIZE (3 by default, so that a grid's arrays are really chunked).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
STATE="${TBT_SLURM_STATE:-$ROOT/.slurm}"
BASE="${TBT_SLURM_PORT_BASE:-16810}"
CTLD_PORT=$((BASE + 7)); SLURMD_PORT=$((BASE + 8)); DBD_PORT=$((BASE + 9)); DB_PORT=$((BASE + 6))
SHORT_MIN="${TBT_SLURM_SHORT_MIN:-2}"
MAX_ARRAY_SIZE="${TBT_SLURM_MAX_ARRAY_SIZE:-3}"
NODE=tbt-node
MUNGE_RUN=/run/munge
CONF="$STATE/etc/slurm.conf"
PACKAGES="munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
NEEDS="munged slurmctld slurmd sbatch squeue sacct sacctmgr scontrol slurmdbd mariadbd mariadb-install-db"

say() { echo "slurm: $*"; }
die() { echo "slurm: $*" >&2; exit 1; }
export SLURM_CONF="$CONF"

missing() { local m=""; for b in $NEEDS; do PATH="$PATH:/usr/sbin:/sbin" command -v "$b" >/dev/null || m="$m $b"; done; echo "$m"; }

install() {
  local m; m="$(missing)"
  [ -z "$m" ] && return 0
  [ "$(id -u)" = 0 ] || die "not installed:$m; run \`sudo make slurm-up\` once (it installs: $PACKAGES)"
  command -v apt-get >/dev/null || die "not installed:$m, and this machine has no apt-get: install $PACKAGES"
  say "installing $PACKAGES (once; about a minute) ..."
  # the packages' own services are not started (no systemd here, and we start our own daemons)
  local policy=/usr/sbin/policy-rc.d created=""
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; created=1; fi
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PACKAGES; } \
    > "$STATE/log/apt.log" 2>&1 || { [ -n "$created" ] && rm -f "$policy"; die "apt-get failed: see $STATE/log/apt.log"; }
  [ -n "$created" ] && rm -f "$policy"
  m="$(missing)"; [ -z "$m" ] || die "still missing after apt-get:$m (see $STATE/log/apt.log)"
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

plugins() {
  local d; for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    [ -e "$d/auth_munge.so" ] && { echo "$d"; return; }
  done
  die "cannot find Slurm's plugin folder (auth_munge.so)"
}

render() {   # template -> file, filling the @...@ values
  local mem cpus host
  cpus="$(nproc)"
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  host="$(hostname -s 2>/dev/null || hostname)"
  sed -e "s|@HOST@|$host|g" -e "s|@NODE@|$NODE|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEM_MB@|$mem|g" \
      -e "s|@STATE@|$STATE|g" -e "s|@USER@|$(id -un)|g" -e "s|@PLUGINS@|$(plugins)|g" \
      -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
      -e "s|@DB_PORT@|$DB_PORT|g" -e "s|@SHORT_MIN@|$SHORT_MIN|g" -e "s|@MAX_ARRAY_SIZE@|$MAX_ARRAY_SIZE|g" \
      "$1" > "$2.tmp"
  mv "$2.tmp" "$2"
}

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds, at most SECONDS
  local end=$(( $(date +%s) + $1 )); shift
  local run=(timeout 5); declare -F "$1" >/dev/null && run=()
  until "${run[@]}" "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.3
  done
}

start_munge() {
  # Slurm's clients find munged at its default socket (AuthInfo=socket= is not honoured by every
  # client, sacctmgr's connection to slurmdbd among them): a munged already answering there (the
  # machine's own) is used as it is, else ours is started there with our key.
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  if [ ! -s "$STATE/munge/munge.key" ]; then
    (umask 077; dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none)
  fi
  chmod 700 "$STATE/munge"; chmod 400 "$STATE/munge/munge.key"
  mkdir -p "$MUNGE_RUN"; chmod 755 "$MUNGE_RUN"
  munged --force --key-file="$STATE/munge/munge.key" --socket="$MUNGE_RUN/munge.socket.2" \
    --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed" \
    || die "munged did not start: see $STATE/log/munged.log"
}

start_db() {
  pid_alive "$STATE/run/mariadbd.pid" && return 0
  if [ ! -d "$STATE/db/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$STATE/db" --user="$(id -un)" --auth-root-authentication-method=normal \
      --skip-test-db > "$STATE/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: see $STATE/log/mariadb-install.log"
  fi
  cat > "$STATE/etc/db-init.sql" <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
  # innodb_lock_wait_timeout: slurmdbd asks for at least 900 s
  (mariadbd --no-defaults --user="$(id -un)" --datadir="$STATE/db" --bind-address=127.0.0.1 --port="$DB_PORT" \
     --socket="$STATE/run/mysql.sock" --pid-file="$STATE/run/mariadbd.pid" --log-error="$STATE/log/mariadb.log" \
     --init-file="$STATE/etc/db-init.sql" --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 \
     --skip-name-resolve > /dev/null 2>&1 &)
  wait_for 20 test -S "$STATE/run/mysql.sock" || die "MariaDB did not start within 20 s: see $STATE/log/mariadb.log"
}

start_dbd() {
  pid_alive "$STATE/run/slurmdbd.pid" && return 0
  slurmdbd || die "slurmdbd did not start: see $STATE/log/slurmdbd.log"
  wait_for 20 sacctmgr -n show cluster || die "slurmdbd does not answer within 20 s: see $STATE/log/slurmdbd.log"
  sacctmgr -n show cluster format=cluster | grep -qw tbt || sacctmgr -i -Q add cluster tbt >/dev/null
}

start_ctld() {
  pid_alive "$STATE/run/slurmctld.pid" && return 0
  slurmctld || die "slurmctld did not start: see $STATE/log/slurmctld.log"
  wait_for 20 scontrol ping || die "slurmctld does not answer within 20 s: see $STATE/log/slurmctld.log"
}

start_slurmd() {
  pid_alive "$STATE/run/slurmd.pid" && return 0
  slurmd -N "$NODE" || die "slurmd did not start: see $STATE/log/slurmd.log"
}

node_ready() { sinfo -h -n "$NODE" -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated|completing)'; }

up() {
  local t0; t0=$(date +%s)
  mkdir -p "$STATE"/{etc,run,log,ctld,spool,db,munge}
  install
  render "$HERE/slurm.conf.in" "$CONF"
  render "$HERE/slurmdbd.conf.in" "$STATE/etc/slurmdbd.conf"
  chmod 600 "$STATE/etc/slurmdbd.conf"
  start_munge
  start_db
  start_dbd
  start_ctld
  start_slurmd
  if ! wait_for 30 node_ready; then
    die "node $NODE is not ready within 30 s ($(sinfo -h -n "$NODE" -o '%T %E' 2>&1)): see $STATE/log/slurmd.log"
  fi
  say "up in $(( $(date +%s) - t0 )) s: node $NODE ($(nproc) CPUs), partitions normal and short (${SHORT_MIN} min), MaxArraySize $MAX_ARRAY_SIZE; state and logs in $STATE"
  say "in your shell: export SLURM_CONF=$CONF"
}

stop_one() {  # stop_one NAME: TERM, then KILL after 10 s
  local f="$STATE/run/$1.pid" n=50
  pid_alive "$f" || { rm -f "$f"; return 0; }
  local pid; pid="$(cat "$f")"
  kill "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ $n -gt 0 ]; do sleep 0.2; n=$((n - 1)); done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

down() {
  if [ -e "$CONF" ] && command -v scancel >/dev/null && pid_alive "$STATE/run/slurmctld.pid"; then
    scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
  fi
  # each daemon takes 1-2 s to exit: the node and controller side by side, then the accounting daemon
  # (the controller's last records go to it), then the database and munge
  for d in slurmd slurmctld; do stop_one "$d" & done; wait
  stop_one slurmdbd
  for d in mariadbd munged; do stop_one "$d" & done; wait
  say "down (state kept in $STATE; \`rm -rf $STATE\` forgets every job)"
}

status() {
  if [ ! -e "$CONF" ]; then echo "slurm: down (never started here: make slurm-up)"; return 1; fi
  local d; for d in munged mariadbd slurmdbd slurmctld slurmd; do
    pid_alive "$STATE/run/$d.pid" || { echo "slurm: down ($d is not running: make slurm-up)"; return 1; }
  done
  node_ready || { echo "slurm: up, but node $NODE is $(sinfo -h -n $NODE -o '%T (%E)' 2>&1)"; return 1; }
  echo "slurm: up (SLURM_CONF=$CONF)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
