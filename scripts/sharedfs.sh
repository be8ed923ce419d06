#!/usr/bin/env bash
# A real shared file system on one host, for tests of what two login nodes do to one volume (issue 30).
#
#   scripts/sharedfs.sh start     # install GlusterFS if missing, start it, mount one volume twice
#   scripts/sharedfs.sh status    # what runs, what is mounted
#   scripts/sharedfs.sh stop      # unmount, stop what start started (by PID), remove the namespace
#   scripts/sharedfs.sh stop --purge   # ... and delete the scratch folder (volume data, state, logs)
#
# GlusterFS (Debian's glusterfs-server / glusterfs-client, 10.3 on bookworm) refuses bricks on
# 127.0.0.1, so the server lives in a network namespace of its own ($SHAREDFS_NETNS) with one
# address ($SHAREDFS_ADDR) on a veth pair whose both ends stay inside that namespace: no traffic
# ever leaves it (the machine has no `dummy` link type, hence veth). glusterd runs there without
# systemd (`nsenter --net=...`, never `ip netns exec`, which remounts /sys), with its state, run
# and log folders under the scratch folder. The two FUSE clients run in that namespace too, so
# they reach the server, while their mounts land in the ordinary mount namespace:
# $SHAREDFS_TEST_DIR/hostA and $SHAREDFS_TEST_DIR/hostB stand in for one volume seen from two
# login nodes (each client has its own page cache, as two hosts would).
#
# The last line `start` prints is the two mount points, space-separated. Running parts are reused,
# so `start` may be run again at any time. Needs root, ip, nsenter, /dev/fuse.
#
# Environment (defaults):
#   SHAREDFS_TEST_DIR   /tmp/orchestrator-sharedfs   scratch folder: state/, run/, log/, brick/, hostA/, hostB/
#   SHAREDFS_NETNS      orch-gluster                 network namespace name
#   SHAREDFS_ADDR       10.213.0.1/24                the server's address, inside that namespace only
#   SHAREDFS_VOLUME     orchvol                      volume name
#   SHAREDFS_CLIENT_OPTS (empty)                     extra glusterfs client options, e.g. --direct-io-mode=enable
#
# Known left-overs outside the scratch folder: glusterd puts each brick's unix socket in
# /var/run/gluster/ (hard-coded); `stop` removes the one of the brick it stops.
set -euo pipefail

DIR=${SHAREDFS_TEST_DIR:-/tmp/orchestrator-sharedfs}
NETNS=${SHAREDFS_NETNS:-orch-gluster}
CIDR=${SHAREDFS_ADDR:-10.213.0.1/24}
ADDR=${CIDR%/*}
VOLUME=${SHAREDFS_VOLUME:-orchvol}
CLIENT_OPTS=${SHAREDFS_CLIENT_OPTS:-}
MOUNTS=("$DIR/hostA" "$DIR/hostB")
NSFILE=/run/netns/$NETNS

log() { printf 'sharedfs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

in_ns() { nsenter --net="$NSFILE" "$@"; }
gl() { in_ns gluster --mode=script --glusterd-sock="$DIR/run/glusterd.socket" --log-file="$DIR/log/cli.log" "$@"; }

# A PID from a file, if that process is alive and its command line names our scratch folder
# (a stale file or a reused PID is never taken for ours).
live_pid() {
    local file=$1 pid
    [[ -s $file ]] || return 1
    pid=$(<"$file")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
    local cmd
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
    [[ $cmd == *"$DIR"* ]] || return 1
    echo "$pid"
}

# Ends one process of ours: TERM, then KILL after 5 s.
end_pid() {
    local pid=$1 what=$2 i
    kill "$pid" 2>/dev/null || return 0
    for i in $(seq 50); do
        [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || { log "stopped $what (pid $pid)"; return 0; }
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    log "killed $what (pid $pid): it did not end on TERM within 5 s"
}

is_mounted() { awk -v m="$1" '$2 == m {found=1} END {exit !found}' /proc/mounts; }

# A mount whose FUSE client is gone (killed, or a machine reused after a run that ended without
# `stop`) stays in /proc/mounts while every access fails ENOTCONN ("Transport endpoint is not
# connected"), even the mkdir -p and stat that would find it: so it is judged before any of them.
is_dead_mount() { is_mounted "$1" && ! stat -f "$1" >/dev/null 2>&1; }

# Lets go of a dead mount of ours (lazily: a process may still hold a path under it).
clear_dead_mount() {
    local m=$1
    is_dead_mount "$m" || return 0
    log "$m is a dead mount (its client is gone): unmounting it"
    umount -l "$m" 2>/dev/null || fusermount -uz "$m" 2>/dev/null || true
    ! is_mounted "$m" || die "could not unmount the dead mount $m (try: umount -l $m)"
}

# --- start ------------------------------------------------------------------------------------

install_gluster() {
    if command -v glusterd >/dev/null && command -v glusterfs >/dev/null && command -v gluster >/dev/null; then
        return
    fi
    log "installing glusterfs-server glusterfs-client (Debian packages)"
    # waits for another apt-get or dpkg; refreshes the package lists and tries again where the install fails
    source "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
    apt_install glusterfs-server glusterfs-client >"${DIR}/log/apt.log" 2>&1 \
        || die "could not install GlusterFS (see $DIR/log/apt.log)"
}

make_netns() {
    # A name left by a machine reused without `stop` may no longer hold a namespace (a plain file
    # where the bind mount was): nsenter then fails, so it is removed and made again.
    if [[ -e $NSFILE ]] && ! nsenter --net="$NSFILE" true 2>/dev/null; then
        log "$NSFILE holds no network namespace: removing it"
        ip netns del "$NETNS" 2>/dev/null || rm -f "$NSFILE"
    fi
    if [[ ! -e $NSFILE ]]; then
        ip netns add "$NETNS"
        log "made network namespace $NETNS"
    fi
    ip -n "$NETNS" link set lo up
    if ! ip -n "$NETNS" link show sfs0 >/dev/null 2>&1; then
        ip -n "$NETNS" link add sfs0 type veth peer name sfs1
    fi
    if ! ip -n "$NETNS" -o addr show dev sfs0 | grep -F " $CIDR " >/dev/null; then
        ip -n "$NETNS" addr add "$CIDR" dev sfs0
    fi
    ip -n "$NETNS" link set sfs1 up
    ip -n "$NETNS" link set sfs0 up
}

start_glusterd() {
    mkdir -p "$DIR/state" "$DIR/run" "$DIR/log" "$DIR/brick"
    local pid
    if pid=$(live_pid "$DIR/run/glusterd.pid"); then
        if [[ $(readlink "/proc/$pid/ns/net") == "$(in_ns readlink /proc/self/ns/net)" ]]; then
            log "glusterd already running (pid $pid)"
            return
        fi
        log "glusterd (pid $pid) runs outside namespace $NETNS (was the namespace removed?): restarting it"
        end_pid "$pid" glusterd
    fi
    # glusterd's hooks and option groups, which it expects in its working directory
    [[ -d $DIR/state/groups || ! -d /var/lib/glusterd/groups ]] || cp -r /var/lib/glusterd/groups "$DIR/state/"
    [[ -d $DIR/state/hooks || ! -d /var/lib/glusterd/hooks ]] || cp -r /var/lib/glusterd/hooks "$DIR/state/"
    cat >"$DIR/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $DIR/state
    option run-directory $DIR/run
    option logging-directory $DIR/log
    option glusterd-sockfile $DIR/run/glusterd.socket
    option transport-type socket
    option transport.socket.listen-port 24007
    option transport.address-family inet
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
EOF
    rm -f "$DIR/run/glusterd.socket"
    in_ns glusterd -f "$DIR/glusterd.vol" -p "$DIR/run/glusterd.pid" -l "$DIR/log/glusterd.log"
    local i
    for i in $(seq 100); do  # 20 s at most
        if [[ -S $DIR/run/glusterd.socket ]] && gl volume list >/dev/null 2>&1; then
            log "glusterd started (pid $(<"$DIR/run/glusterd.pid"))"
            return
        fi
        sleep 0.2
    done
    die "glusterd did not answer within 20 s (see $DIR/log/glusterd.log)"
}

start_volume() {
    if ! gl volume info "$VOLUME" >/dev/null 2>&1; then
        # `force`: the brick lies on the root file system, which glusterd refuses otherwise
        gl volume create "$VOLUME" "$ADDR:$DIR/brick" force >/dev/null
        log "created volume $VOLUME on $ADDR:$DIR/brick"
    fi
    local info
    info=$(gl volume info "$VOLUME")
    if [[ $info != *$'\nStatus: Started'* ]]; then
        gl volume start "$VOLUME" >/dev/null
        log "started volume $VOLUME"
    fi
    local i
    for i in $(seq 50); do  # the brick process online (glusterd restarts it itself; `force` if it died)
        info=$(gl volume status "$VOLUME" --xml 2>/dev/null || true)
        if [[ $info == *"<status>1</status>"* ]]; then
            return
        fi
        if (( i == 15 )); then
            gl volume start "$VOLUME" force >/dev/null 2>&1 || true
        fi
        sleep 0.2
    done
    die "the brick of $VOLUME is not online within ~25 s (see $DIR/log/bricks/)"
}

mount_twice() {
    local m name pid i
    for m in "${MOUNTS[@]}"; do
        name=$(basename "$m")
        clear_dead_mount "$m"
        if is_mounted "$m"; then
            log "$m already mounted"
            continue
        fi
        mkdir -p "$m"
        if pid=$(live_pid "$DIR/run/mnt-$name.pid"); then end_pid "$pid" "client of $m"; fi
        # The client in the server's network namespace; the mount lands in the ordinary one.
        # shellcheck disable=SC2086
        in_ns glusterfs --volfile-server="$ADDR" --volfile-id="$VOLUME" --process-name=fuse $CLIENT_OPTS \
            -l "$DIR/log/mnt-$name.log" -p "$DIR/run/mnt-$name.pid" "$m"
        for i in $(seq 100); do
            if is_mounted "$m" && stat -f "$m" >/dev/null 2>&1; then break; fi
            sleep 0.1
        done
        is_mounted "$m" || die "$m did not mount within 10 s (see $DIR/log/mnt-$name.log)"
        log "mounted $VOLUME on $m"
    done
}

check_shared() {
    # One file written through each mount must be read through the other.
    local token a b i
    token="$(hostname)-$$-$(date +%s%N)"
    a=${MOUNTS[0]} b=${MOUNTS[1]}
    for pair in "$a $b" "$b $a"; do
        read -r w r <<<"$pair"
        echo "$token" >"$w/.sharedfs-check"
        for i in $(seq 50); do
            [[ $(cat "$r/.sharedfs-check" 2>/dev/null) == "$token" ]] && break
            sleep 0.1
        done
        [[ $(cat "$r/.sharedfs-check" 2>/dev/null) == "$token" ]] \
            || die "a file written through $w is not seen through $r within 5 s"
        token="$token-back"
    done
    rm -f "$a/.sharedfs-check"
    local t
    t=$(awk -v m="$a" '$2 == m {print $3}' /proc/mounts)
    log "checked: $a and $b show one volume ($t)"
}

cmd_start() {
    [[ $(id -u) == 0 ]] || die "needs root (network namespaces, FUSE mounts)"
    [[ -e /dev/fuse ]] || die "no /dev/fuse"
    mkdir -p "$DIR/log"
    install_gluster
    make_netns
    start_glusterd
    start_volume
    mount_twice
    check_shared
    echo "${MOUNTS[0]} ${MOUNTS[1]}"
}

# --- stop -------------------------------------------------------------------------------------

cmd_stop() {
    local m name pid f sock
    for m in "${MOUNTS[@]}"; do
        name=$(basename "$m")
        if is_mounted "$m"; then
            umount "$m" 2>/dev/null || umount -l "$m" || log "could not unmount $m"
            is_mounted "$m" || log "unmounted $m"
        fi
        if pid=$(live_pid "$DIR/run/mnt-$name.pid"); then end_pid "$pid" "client of $m"; fi
        rm -f "$DIR/run/mnt-$name.pid"
    done
    # the brick processes, found by their pid files under our run directory
    if [[ -d $DIR/run/vols ]]; then
        while IFS= read -r f; do
            if pid=$(live_pid "$f"); then
                sock=$(tr '\0' '\n' <"/proc/$pid/cmdline" | awk 'p {print; exit} $0 == "-S" {p=1}')
                end_pid "$pid" "brick (glusterfsd)"
                [[ $sock == /var/run/gluster/*.socket || $sock == /run/gluster/*.socket ]] && rm -f "$sock"
            fi
        done < <(find "$DIR/run/vols" -name '*.pid')
    fi
    if pid=$(live_pid "$DIR/run/glusterd.pid"); then end_pid "$pid" glusterd; fi
    rm -f "$DIR/run/glusterd.pid" "$DIR/run/glusterd.socket"
    if [[ -e $NSFILE ]]; then
        ip netns del "$NETNS" && log "removed network namespace $NETNS"
    fi
    if [[ ${1:-} == --purge ]]; then
        rm -rf "$DIR" && log "removed $DIR"
    fi
}

# --- status -----------------------------------------------------------------------------------

cmd_status() {
    local ok=0 pid m f
    if [[ -e $NSFILE ]]; then
        echo "netns $NETNS: present, $(ip -n "$NETNS" -o -4 addr show dev sfs0 2>/dev/null | awk '{print $4}')"
    else
        echo "netns $NETNS: absent"; ok=1
    fi
    if pid=$(live_pid "$DIR/run/glusterd.pid"); then echo "glusterd: running (pid $pid)"; else echo "glusterd: not running"; ok=1; fi
    if [[ -d $DIR/run/vols ]]; then
        while IFS= read -r f; do
            if pid=$(live_pid "$f"); then echo "brick: running (pid $pid)"; else echo "brick: not running ($f)"; ok=1; fi
        done < <(find "$DIR/run/vols" -name '*.pid')
    fi
    for m in "${MOUNTS[@]}"; do
        if is_dead_mount "$m"; then
            echo "$m: dead mount (its client is gone; \`$0 start\` unmounts and mounts it again)"; ok=1
        elif is_mounted "$m"; then
            echo "$m: mounted ($(awk -v m="$m" '$2 == m {print $1, $3}' /proc/mounts))"
        else
            echo "$m: not mounted"; ok=1
        fi
    done
    return $ok
}

case ${1:-} in
    start) cmd_start ;;
    stop) shift; cmd_stop "$@" ;;
    status) cmd_status ;;
    *) echo "usage: $0 start | stop [--purge] | status" >&2; exit 2 ;;
esac
