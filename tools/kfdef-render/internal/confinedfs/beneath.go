package confinedfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// root is a directory reads are confined to, and a descriptor of it the kernel resolves paths from.
type root struct {
	path string
	fd   int
}

func openRoot(path string) (root, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return root{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return root{path: path, fd: fd}, nil
}

// rootOf is the innermost root the clean absolute path is lexically below, and the path relative to it.
func rootOf(path string, roots []root) (root, string, bool) {
	best := -1
	for i, r := range roots {
		if within(path, []string{r.path}) && (best < 0 || len(r.path) > len(roots[best].path)) {
			best = i
		}
	}
	if best < 0 {
		return root{}, "", false
	}
	return roots[best], strings.TrimPrefix(strings.TrimPrefix(path, roots[best].path), "/"), true
}

// kernelEnforced reports whether this kernel resolves paths beneath a descriptor (openat2, Linux 5.6): without it,
// opens fall back to the check made just before them.
func kernelEnforced(r root) bool {
	fd, err := unix.Openat2(r.fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	if err != nil {
		return !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM)
	}
	unix.Close(fd)
	return true
}

// openBeneath opens path, which readable has just accepted, so that the kernel refuses it at open time if it has
// left the roots since: resolved from the descriptor of the root it is below, with RESOLVE_BENEATH (a symlink is
// followed only while it stays below that root). A path reaching its file through an absolute symlink, or one into
// another root, is resolved here and opened again with no symlink followed at all: a symlink swapped in after that
// resolution makes the open fail instead of leave. What is read is the cleaned path, kustomize's reading (readable
// has refused a path whose other reading leaves the roots).
func (c *FS) openBeneath(op, path string, flags int) (*os.File, error) {
	clean := filepath.Clean(Absolute(path))
	if !c.enforced {
		file, err := os.OpenFile(clean, flags, 0)
		return file, err
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	if r, rel, ok := rootOf(clean, c.rootFDs); ok {
		fd, err := unix.Openat2(r.fd, orDot(rel), how)
		if err == nil {
			return os.NewFile(uintptr(fd), clean), nil
		}
		if !errors.Is(err, unix.EXDEV) {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
	resolved, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return nil, err
	}
	r, rel, ok := rootOf(resolved, c.rootFDs)
	if !ok {
		return nil, c.refuse(op, path, ErrOutside)
	}
	how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	fd, err := unix.Openat2(r.fd, orDot(rel), how)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), clean), nil
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return nil, c.refuse(op, path, errors.Join(ErrOutside, err)) // it changed since it was resolved
	default:
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
}

// orDot is rel, or "." for the root itself.
func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
