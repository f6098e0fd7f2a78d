#!/bin/sh
# mpirun's remote agent (--mca plm_rsh_agent) for the hosts of
# scripts/netns_hosts.sh: called as `netns_rsh.sh [options] HOST COMMAND...`
# like ssh, it runs COMMAND with sh in HOST's network namespace and in a UTS
# namespace of its own whose hostname is HOST, so each rank sees the host it
# was placed on. Options (ssh's) are ignored.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
if [ $# -lt 2 ]; then
  echo "netns_rsh: usage: netns_rsh.sh [options] HOST COMMAND..." >&2
  exit 255
fi
host=$1
shift
if ! ip netns list | grep -q "^$host\( \|$\)"; then
  echo "netns_rsh: no host '$host' (no such network namespace)" >&2
  exit 255
fi
# As ssh would find it: a host whose link is cut cannot be reached.
if [ "$(ip netns exec "$host" cat /sys/class/net/eth0/carrier 2>/dev/null)" != 1 ]; then
  echo "netns_rsh: host '$host' is unreachable (its link is down)" >&2
  exit 255
fi
exec ip netns exec "$host" unshare --uts /bin/sh -c "hostname '$host' && $*"
