// Package platform is aegis's seam to the operating system for what Linux,
// macOS and Windows do differently: the owner and access of a private file
// or directory, an exclusive lock that the system drops when its holder
// dies, whether a process exists, the free space of a disk, and opening a
// file without following a symbolic link.
//
// Invariants:
//   - The per-system files hold only the system calls. What is decided
//     from what they read (which access to a file counts as someone
//     else's) is plain Go in files without build tags, tested on Linux.
//   - On Windows the access of a file is read from its DACL: an entry
//     that grants anything but reading attributes, reading the security
//     descriptor or synchronizing to a SID other than the user's own,
//     SYSTEM, Administrators, CREATOR OWNER or OWNER RIGHTS counts as
//     access by others, and is reported as the group and other bits of a
//     Unix mode, so the callers' checks (mode&0o077 == 0) stay one piece.
//     A missing DACL (everyone has full control), an entry of a type this
//     package does not know and an allowing entry whose SID it cannot read
//     count as full access by others: what cannot be checked is refused.
//     Denying entries are ignored, which can only make a file look more
//     open than it is.
//   - Owned means owned by this user; on Windows an owner of SYSTEM or
//     Administrators is taken for the user's own (they can take any file
//     anyway, and an elevated user's files are owned by Administrators).
//     A file owned by anyone else also reads as open to others, since its
//     owner may rewrite its DACL at will.
//   - Locks are advisory on Unix (flock) and, on Windows, a LockFileEx
//     lock on one byte far past any content, so that readers of the file
//     are never blocked by it.
package platform
