#!/bin/sh
# mpirun's remote agent (--mca plm_rsh_agent) for the hosts of
# scripts/netns_hosts.sh: called as `netns_rsh.sh [options] HOST COMMAND...`
# like ssh, it runs COMMAND on HOST over ssh, with the key and address the
# host was brought up with. Options (ssh's) are ignored.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
if [ $# -lt 2 ]; then
  echo "netns_rsh: usage: netns_rsh.sh [options] HOST COMMAND..." >&2
  exit 255
fi
host=$1
shift
config=/run/zerod-netns/host/$host/ssh_config
if [ ! -f "$config" ]; then
  echo "netns_rsh: no host '$host' (netns_hosts.sh brought up no such host)" >&2
  exit 255
fi
exec ssh -F "$config" "$host" "$@"
