#!/usr/bin/env bash
# Several "hosts" on this machine, for multi-host tests and trials: each a
# network namespace with one interface, joined to a bridge in this namespace
# by a veth pair, so ranks on different hosts talk over TCP as on a cluster.
# mpirun starts ranks in them through scripts/netns_rsh.sh (plm_rsh_agent).
# Needs root (ip netns).
#
#   netns_hosts.sh up PREFIX N NET   hosts PREFIX1..PREFIXN at NET.11.., the bridge PREFIXbr at NET.1
#   netns_hosts.sh down PREFIX N     removes them, ending what still runs in them
#   netns_hosts.sh cut PREFIX I      takes host I's link down (the host disappears)
#
# PREFIX: at most 8 characters (interface names are 15 at most); NET: the
# first three numbers of a /24 no other interface here uses, e.g. 10.231.7.
# A host's namespace and its link on the bridge are both named PREFIXi.
set -euo pipefail

usage() {
  sed -n '8,10p' "$0" >&2
  exit 2
}

[ $# -ge 3 ] || usage
cmd=$1 prefix=$2 n=$3
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "netns_hosts: bad prefix '$prefix'" >&2; exit 2; }
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || { echo "netns_hosts: bad count '$n'" >&2; exit 2; }

case $cmd in
  up)
    [ $# -eq 4 ] || usage
    net=$4
    [[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "netns_hosts: bad network '$net'" >&2; exit 2; }
    ip link add "${prefix}br" type bridge
    ip addr add "$net.1/24" dev "${prefix}br"
    ip link set "${prefix}br" up
    for i in $(seq 1 "$n"); do
      host=$prefix$i
      ip netns add "$host"
      ip link add "$host" type veth peer name eth0 netns "$host"
      ip link set "$host" master "${prefix}br" up
      ip -n "$host" addr add "$net.$((10 + i))/24" dev eth0
      ip -n "$host" link set eth0 up
      ip -n "$host" link set lo up
    done
    ;;
  down)
    for i in $(seq 1 "$n"); do
      host=$prefix$i
      if ip netns pids "$host" >/dev/null 2>&1; then
        pids=$(ip netns pids "$host")
        [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
        ip netns del "$host"
      fi
      ip link del "$host" 2>/dev/null || true
    done
    ip link del "${prefix}br" 2>/dev/null || true
    ;;
  cut)
    ip link set "$prefix$n" down
    ;;
  *)
    usage
    ;;
esac
