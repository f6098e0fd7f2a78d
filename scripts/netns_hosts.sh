#!/usr/bin/env bash
# Several "hosts" on this machine, for multi-host tests and trials. Each is
# a network namespace with one interface, joined to a bridge in this
# namespace by a veth pair, so ranks on different hosts talk over TCP as on
# a cluster; and a PID, mount and UTS namespace of its own (its own /proc
# and hostname), whose first process is an sshd on the host's address. A
# process on one host sees no process of another; mpirun reaches the hosts
# over ssh through scripts/netns_rsh.sh (plm_rsh_agent). Where the kernel
# has a memory cgroup hierarchy to write, each host is a memory cgroup of
# its own.
# Needs root, iproute2 and openssh-server.
#
#   netns_hosts.sh up PREFIX N NET   hosts PREFIX1..PREFIXN at NET.11.., the bridge PREFIXbr at NET.1
#   netns_hosts.sh down PREFIX N     removes them, ending what still runs in them
#   netns_hosts.sh cut PREFIX I      takes host I's link down (the host disappears)
#   netns_hosts.sh mend PREFIX I     brings host I's link up again
#   netns_hosts.sh limit PREFIX I B  host I's processes may use B bytes of memory together
#
# PREFIX: at most 8 characters (interface names are 15 at most); NET: the
# first three numbers of a /24 no other interface here uses, e.g. 10.231.7.
# A host's namespace and its link on the bridge are both named PREFIXi; what
# describes it is in /run/zerod-netns/host/PREFIXi: ssh_config (how to reach
# it), pid (its sshd, as this namespace numbers it: `nsenter --target` runs
# a command on the host), cgroup (its memory cgroup, when there is one).
set -Eeuo pipefail

usage() {
  sed -n '12,16p' "$0" >&2
  exit 2
}

[ $# -ge 3 ] || usage
cmd=$1 prefix=$2 n=$3
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "netns_hosts: bad prefix '$prefix'" >&2; exit 2; }
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || { echo "netns_hosts: bad count '$n'" >&2; exit 2; }
run=/run/zerod-netns
key=$run/set/$prefix/id

# The cgroup the hosts' memory cgroups go in, made: under v1's memory
# controller, else under v2's root when it hands memory to its children;
# none without either, or where cgroups cannot be written (a container).
cgroup_root() {
  local root
  if [ -f /sys/fs/cgroup/memory/cgroup.procs ]; then
    root=/sys/fs/cgroup/memory/zerod-netns
    mkdir -p "$root" 2>/dev/null && echo "$root"
  elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    root=/sys/fs/cgroup/zerod-netns
    mkdir -p "$root" 2>/dev/null && echo +memory > "$root/cgroup.subtree_control" 2>/dev/null && echo "$root"
  fi
  return 0
}

start_host() {  # i net
  local i=$1 net=$2 host=$prefix$1
  local dir=$run/host/$host addr=$net.$((10 + $1))
  mkdir -p "$dir"
  rm -f "$dir/host_key" "$dir/host_key.pub"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
  cat > "$dir/sshd_config" <<EOF
ListenAddress $addr
HostKey $dir/host_key
AuthorizedKeysFile $key.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
EOF
  cat > "$dir/ssh_config" <<EOF
Host $host
  HostName $addr
  User root
  IdentityFile $key
  IdentitiesOnly yes
  BatchMode yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 5
EOF
  local cg="" root
  root=$(cgroup_root)
  if [ -n "$root" ] && mkdir -p "$root/$host" 2>/dev/null; then
    cg=$root/$host
    echo "$cg" > "$dir/cgroup"
  fi
  # The sshd is the host's first process; it joins the host's cgroup first,
  # so that all it starts is counted there (not what nsenter brings in).
  # setsid runs nsenter in its place (a background job leads no process
  # group), so $! is unshare's pid, and the sshd is its child.
  setsid nsenter --net="/run/netns/$host" unshare --pid --fork --mount-proc --uts \
    sh -c "hostname '$host' && { [ -z '$cg' ] || echo 0 > '$cg/cgroup.procs' || true; } && exec /usr/sbin/sshd -D -e -f '$dir/sshd_config'" \
    < /dev/null > "$dir/sshd.log" 2>&1 &
  local unshare=$! pid=""
  for _ in $(seq 100); do
    pid=$(pgrep -P "$unshare" || true)
    if [ -n "$pid" ] && ssh -F "$dir/ssh_config" "$host" true 2>/dev/null; then
      echo "$pid" > "$dir/pid"
      return 0
    fi
    sleep 0.1
  done
  echo "netns_hosts: the sshd of $host did not start: $(cat "$dir/sshd.log")" >&2
  return 1
}

case $cmd in
  up)
    [ $# -eq 4 ] || usage
    net=$4
    [[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "netns_hosts: bad network '$net'" >&2; exit 2; }
    [ -x /usr/sbin/sshd ] || { echo "netns_hosts: no /usr/sbin/sshd (install openssh-server)" >&2; exit 2; }
    # What came up goes again when a step fails.
    trap 'status=$?; bash "$0" down "$prefix" "$n" 2>/dev/null; exit $status' ERR
    mkdir -p /run/sshd "$run/set/$prefix"
    rm -f "$key" "$key.pub"
    ssh-keygen -q -t ed25519 -N '' -f "$key"
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
    for i in $(seq 1 "$n"); do start_host "$i" "$net"; done
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
      if [ -f "$run/host/$host/cgroup" ]; then
        cg=$(cat "$run/host/$host/cgroup")
        # Killed processes leave their cgroup a moment after.
        for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
      fi
      rm -rf "${run:?}/host/$host"
    done
    ip link del "${prefix}br" 2>/dev/null || true
    rm -rf "${run:?}/set/$prefix"
    ;;
  cut | mend)
    ip link set "$prefix$n" "$([ "$cmd" = cut ] && echo down || echo up)"
    ;;
  limit)
    [ $# -eq 4 ] || usage
    dir=$run/host/$prefix$n
    [ -f "$dir/cgroup" ] || { echo "netns_hosts: $prefix$n has no memory cgroup (the kernel offers none here)" >&2; exit 1; }
    cg=$(cat "$dir/cgroup")
    # Memory, and no swap beyond it (where the kernel accounts swap).
    if [ -f "$cg/memory.limit_in_bytes" ]; then
      echo "$4" > "$cg/memory.limit_in_bytes"
      [ ! -f "$cg/memory.memsw.limit_in_bytes" ] || echo "$4" > "$cg/memory.memsw.limit_in_bytes"
    else
      echo "$4" > "$cg/memory.max"
      [ ! -f "$cg/memory.swap.max" ] || echo 0 > "$cg/memory.swap.max"
    fi
    ;;
  *)
    usage
    ;;
esac
