#!/usr/bin/env bash
# A 3-member etcd cluster on loopback, for the tests and for trying replicas on one machine
# (README, "More than one machine"). Debian's etcd-server (3.4): `apt-get install etcd-server
# etcd-client`. Plain on purpose: each member is one `etcd` command you could type yourself.
#
#   scripts/etcd-cluster.sh start DIR [CLIENT_PORTS [PEER_PORTS]]   # default 23791,23792,23793
#                                                                   #     and 23801,23802,23803
#   scripts/etcd-cluster.sh stop DIR                                # every member of DIR
#   scripts/etcd-cluster.sh start-member DIR NAME                   # one again (m1, m2, m3)
#   scripts/etcd-cluster.sh stop-member DIR NAME                    # SIGKILL: as a crash
#
# DIR keeps each member's data (DIR/m1 ...), log (DIR/m1.log), pid (DIR/m1.pid) and command
# (DIR/m1.cmd). `start` prints the client endpoints once all three answer `endpoint health`.
# Loopback only: nothing listens on another address.
set -euo pipefail

NAMES=(m1 m2 m3)
WAIT_S="${ETCD_WAIT_S:-30}"

say() { printf '[etcd-cluster] %s\n' "$*" >&2; }

endpoints() {  # DIR -> the client URLs, comma-separated
  cat "$1/endpoints"
}

start_member() {  # DIR NAME
  local dir="$1" name="$2"
  if [ -f "$dir/$name.pid" ] && kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
    return 0
  fi
  # The saved command is one word per line: read back as words, never split by the shell.
  (mapfile -t cmd < "$dir/$name.cmd"; exec "${cmd[@]}" >>"$dir/$name.log" 2>&1) &
  echo $! > "$dir/$name.pid"
}

wait_healthy() {  # DIR
  local dir="$1" deadline=$((SECONDS + WAIT_S))
  until ETCDCTL_API=3 etcdctl --endpoints "$(endpoints "$dir")" --command-timeout=2s \
      endpoint health >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "the cluster in $dir did not become healthy within ${WAIT_S}s; logs: $dir/m*.log"
      return 1
    fi
    sleep 0.2
  done
}

start() {  # DIR [CLIENT_PORTS [PEER_PORTS]]
  local dir="$1" clients="${2:-23791,23792,23793}" peers="${3:-23801,23802,23803}"
  local -a cp pp
  IFS=, read -r -a cp <<< "$clients"
  IFS=, read -r -a pp <<< "$peers"
  [ "${#cp[@]}" -eq 3 ] && [ "${#pp[@]}" -eq 3 ] || { say "need 3 client and 3 peer ports"; exit 2; }
  mkdir -p "$dir"
  local cluster="" urls="" i
  for i in 0 1 2; do
    cluster+="${cluster:+,}${NAMES[$i]}=http://127.0.0.1:${pp[$i]}"
    urls+="${urls:+,}http://127.0.0.1:${cp[$i]}"
  done
  echo "$urls" > "$dir/endpoints"
  for i in 0 1 2; do
    local name="${NAMES[$i]}"
    printf '%s\n' etcd --name "$name" --data-dir "$dir/$name" \
      --listen-client-urls "http://127.0.0.1:${cp[$i]}" \
      --advertise-client-urls "http://127.0.0.1:${cp[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${pp[$i]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${pp[$i]}" \
      --initial-cluster "$cluster" --initial-cluster-token "rtvi-$(basename "$dir")" \
      --initial-cluster-state new --heartbeat-interval 50 --election-timeout 500 \
      --logger zap --log-level warn > "$dir/$name.cmd"
    start_member "$dir" "$name"
  done
  wait_healthy "$dir"
  endpoints "$dir"
}

stop_member() {  # DIR NAME [SIGNAL]: returns once the member is gone
  local dir="$1" name="$2" sig="${3:-KILL}" pid deadline=$((SECONDS + 10))
  [ -f "$dir/$name.pid" ] || return 0
  pid="$(cat "$dir/$name.pid")"
  kill "-$sig" "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid")" != "Z" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  rm -f "$dir/$name.pid"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) for n in "${NAMES[@]}"; do stop_member "$2" "$n" TERM; done ;;
  start-member) start_member "$2" "$3"; echo "$(endpoints "$2")" ;;
  stop-member) stop_member "$2" "$3" KILL ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
