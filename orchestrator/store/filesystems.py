"""Which file system a path lies on, and whether other hosts may see it too.

A results file on a network file system (a project directory on NFS, Lustre, GPFS, BeeGFS,
CephFS, GlusterFS ... seen from several login nodes) must not be opened as one on a local disk:
SQLite's WAL shares memory through a `-shm` file that other hosts cannot see, and each client's
page cache can hide another host's commits (measured: ../shared/site-facts.md, docs/shared-results.md).
sqlite_file.py decides what to do; this module only answers *what is under the path*.

Two witnesses, both read without privileges and in microseconds:
- the mount table (`/proc/self/mounts`): the file-system type of the mount that holds the path
  (the longest mount point that is a prefix of it), and for FUSE its subtype (`fuse.glusterfs`,
  `fuse.sshfs`) or, where the type is bare `fuse`, its source (MooseFS mounts as `mfs#host:9421`);
- `statfs(2)`'s magic number, which names the kernel's file system even where the mount table is
  not readable (a container without /proc) — but every FUSE file system shares one magic.

The pure parts (`parse_mounts`, `mount_of`, `classify`) are tested on canned mount tables and
magics for file systems that cannot be mounted here (NFS, Lustre, GPFS, BeeGFS, CIFS).
"""
from __future__ import annotations

import ctypes
import os
from typing import NamedTuple, Optional, Sequence

#: statfs f_type magics of network and cluster file systems (linux/magic.h and the vendors' own).
NETWORK_MAGIC = {
    0x6969: "nfs",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x19830326: "beegfs",
    0x00C36400: "ceph",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x517B: "smb",
    0x564C: "ncp",
    0x6B414653: "afs",
    0x5346414F: "afs",
    0x013111A8: "ibrix",
    0xA501FCF5: "vxfs",  # cluster VxFS
    0x73757245: "coda",
    0x7461636F: "ocfs2",
    0x01161970: "gfs2",
    0x2BAD1DEA: "wekafs",
    0xAAD7AAEA: "panfs",
}
#: statfs f_type of every FUSE file system: local (bindfs) or remote (sshfs, GlusterFS), told
#: apart only by the mount table.
FUSE_MAGIC = 0x65735546

#: Mount-table types of network and cluster file systems (kernel clients).
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "smbfs", "ncpfs", "afs",
    "9p", "coda", "ocfs2", "gfs2", "glusterfs", "wekafs", "panfs", "orangefs", "pvfs2", "vxfs",
})
#: FUSE subtypes (`fuse.<subtype>`) that reach another host's data. A FUSE subtype not named here
#: nor in LOCAL_FUSE is taken as a network one: when unsure, the safe side.
NETWORK_FUSE = frozenset({
    "glusterfs", "ceph-fuse", "ceph", "sshfs", "smbnetfs", "mfs", "moosefs", "lizardfs", "s3fs",
    "gcsfuse", "rclone", "juicefs", "beegfs", "davfs", "curlftpfs", "cvmfs2", "lustre", "goofys",
    "blobfuse", "blobfuse2", "weka", "seaweedfs", "xtreemfs",
})
#: FUSE file systems that only show local data in another way.
LOCAL_FUSE = frozenset({
    "bindfs", "fuse-overlayfs", "squashfuse", "lxcfs", "gvfsd-fuse", "portal", "encfs", "gocryptfs",
    "archivemount", "fuse-zip", "ntfs", "ntfs-3g", "exfat", "fuseiso", "apfs-fuse", "unionfs",
    "mergerfs", "ciopfs", "vmhgfs-fuse", "snapfuse", "appimage",
})
#: Sources of bare `fuse` mounts that name a network file system (`mfs#host:9421`).
NETWORK_FUSE_SOURCES = ("mfs#", "lizardfs#", "glusterfs#", "sshfs#", "s3fs#")


class Mount(NamedTuple):
    """One line of the mount table: where, what type, from what, with which options."""

    point: str
    fstype: str
    source: str
    options: str = ""


class FileSystem(NamedTuple):
    """What lies under a path: its name (`ext4`, `fuse.glusterfs`, `nfs`), whether other hosts
    may write the same files (`network`), and how that was known (`mount table` or `statfs`)."""

    name: str
    network: bool
    how: str
    #: POSIX locks are each host's own (sshfs, smbnetfs, NFS local_lock=all|posix, Lustre
    #: localflock): SQLite's own locks then guard nothing between hosts (site-facts.md)
    local_locks: bool = False


def parse_mounts(text: str) -> list[Mount]:
    """The lines of /proc/mounts (or /etc/mtab): space-separated fields, with space, tab,
    newline and backslash written as octal escapes (`\\040`)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            source, point, fstype = (_unescape(f) for f in fields[:3])
            mounts.append(Mount(point, fstype, source, fields[3] if len(fields) > 3 else ""))
    return mounts


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1:i + 4]) == 3 and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_of(path: str, mounts: Sequence[Mount]) -> Optional[Mount]:
    """The mount that holds the absolute `path`: the longest mount point that is `path` or one of
    its parent directories; the last such line where one point was mounted over again."""
    best: Optional[Mount] = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        if path == point or path.startswith(point if point == "/" else point + "/"):
            if best is None or len(point) >= len(best.point.rstrip("/") or "/"):
                best = mount
    return best


#: FUSE subtypes whose POSIX locks stay on each host (measured: site-facts.md), and the mount
#: options that make a kernel client's locks local (NFS `local_lock=`, Lustre `localflock`).
LOCAL_LOCK_FUSE = frozenset({"sshfs", "smbnetfs"})
LOCAL_LOCK_OPTIONS = ("local_lock=all", "local_lock=posix", "localflock")


def classify(mount: Optional[Mount], magic: Optional[int]) -> FileSystem:
    """What a mount-table line and a statfs magic say together (either may be missing), and
    whether its POSIX locks are each host's own (known from the mount table only)."""
    fs = _classify(mount, magic)
    if mount is None or not fs.network:
        return fs
    options = mount.options.split(",")
    local = mount.fstype.partition(".")[2] in LOCAL_LOCK_FUSE or any(o in options for o in LOCAL_LOCK_OPTIONS)
    return fs._replace(local_locks=local)


def _classify(mount: Optional[Mount], magic: Optional[int]) -> FileSystem:
    if mount is not None:
        fstype, source = mount.fstype, mount.source
        if fstype.startswith("fuse.") or fstype == "fuse" or fstype == "fuseblk":
            subtype = fstype.partition(".")[2]
            if not subtype:  # bare fuse: the source may say what it is (MooseFS: mfs#host:9421)
                network = source.startswith(NETWORK_FUSE_SOURCES)
                return FileSystem(f"{fstype} ({source})", network, "mount table")
            return FileSystem(fstype, subtype in NETWORK_FUSE or subtype not in LOCAL_FUSE, "mount table")
        if fstype in NETWORK_TYPES:
            return FileSystem(fstype, True, "mount table")
        if magic is None or magic not in NETWORK_MAGIC:
            return FileSystem(fstype, False, "mount table")
    if magic in NETWORK_MAGIC:
        return FileSystem(NETWORK_MAGIC[magic], True, "statfs")
    if magic == FUSE_MAGIC:  # FUSE without a mount table: which one is unknown, so the safe side
        return FileSystem("fuse", True, "statfs")
    return FileSystem("unknown" if magic is None else f"statfs magic {magic:#x}", False, "statfs")


class _StatFs(ctypes.Structure):
    # struct statfs of Linux (64-bit and 32-bit with _FILE_OFFSET_BITS=64 differ in widths; only
    # f_type, the first field, is read, and it is a native long on both)
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 256)]


def statfs_magic(path: str) -> Optional[int]:
    """statfs(2)'s f_type for `path` (None where it cannot be asked)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # this process's own libc (find_library would run ldconfig)
        buf = _StatFs()
        if libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
            return None
        return buf.f_type & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


def read_mounts(table: str = "/proc/self/mounts") -> list[Mount]:
    try:
        with open(table, encoding="utf-8", errors="surrogateescape") as f:
            return parse_mounts(f.read())
    except OSError:
        return []


def filesystem_of(path: str) -> FileSystem:
    """The file system under `path` (a file or directory; where it does not exist yet, the nearest
    existing parent's)."""
    here = os.path.realpath(os.path.abspath(path))
    while not os.path.exists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return classify(mount_of(here, read_mounts()), statfs_magic(here))
