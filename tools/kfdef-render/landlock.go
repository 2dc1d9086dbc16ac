package main

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Filesystem rights Landlock knows at each ABI version (index = version); all are handled, so whatever is not
// granted below is denied.
var landlockFsRights = []uint64{
	0,
	1<<13 - 1, // v1: execute, write, read file and directory, remove, make any kind of file
	1<<14 - 1, // v2: refer (link or rename across directories)
	1<<15 - 1, // v3: truncate
	1<<15 - 1, // v4: network rights only
	1<<16 - 1, // v5: ioctl on devices
}

const landlockRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR

// restrictWithLandlock asks the kernel to let this process (all its threads) read only below roots and, from
// ABI 4 on, open no TCP connection. It returns what it achieved, for the render's log line; a kernel without
// Landlock only loses this second layer.
func restrictWithLandlock(roots []string, allowRemote bool) string {
	if allowRemote {
		return "landlock not used (remote bases allowed)"
	}
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return fmt.Sprintf("landlock unavailable (%v)", errno)
	}
	version := int(abi)
	attr := unix.LandlockRulesetAttr{Access_fs: landlockFsRights[min(version, len(landlockFsRights)-1)]}
	if version >= 4 {
		attr.Access_net = unix.LANDLOCK_ACCESS_NET_CONNECT_TCP | unix.LANDLOCK_ACCESS_NET_BIND_TCP
	}
	size := unsafe.Sizeof(attr.Access_fs)
	if version >= 4 {
		size += unsafe.Sizeof(attr.Access_net)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Sprintf("landlock unavailable (create ruleset: %v)", errno)
	}
	defer unix.Close(int(fd))
	for _, root := range roots {
		dir, err := unix.Open(root, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Sprintf("landlock not applied (open %s: %v)", root, err)
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: landlockRead, Parent_fd: int32(dir)}
		_, _, errno = unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		unix.Close(dir)
		if errno != 0 {
			return fmt.Sprintf("landlock not applied (add rule for %s: %v)", root, errno)
		}
	}
	// Every thread of the Go runtime must be restricted, not just the calling one.
	if _, _, errno = syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		return fmt.Sprintf("landlock not applied (no_new_privs: %v)", errno)
	}
	if _, _, errno = syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Sprintf("landlock not applied (restrict self: %v)", errno)
	}
	if version >= 4 {
		return fmt.Sprintf("landlock ABI %d: reads only the build's trees, no TCP", version)
	}
	return fmt.Sprintf("landlock ABI %d: reads only the build's trees", version)
}
