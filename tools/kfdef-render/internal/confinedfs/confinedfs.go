// Package confinedfs is the filesystem kfdef-render hands kustomize: it reads only inside the build's trees (the
// roots), writes only in an allowed temporary directory (where remote bases are cloned, when they are allowed),
// and refuses everything else with a *ConstraintError. A path is inside only if every way of reading it stays
// inside: kustomize's (cleaned lexically, then symlinks followed) and the operating system's (".." after a symlink
// means the link target's parent). A file that passed that check is then opened beneath its root's descriptor
// (beneath.go), so that a tree changed between the check and the open is refused by the kernel, not read.
package confinedfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// maxRecorded bounds the refusals an FS remembers for Refused.
const maxRecorded = 16

// FS implements kustomize's filesys.FileSystem on the disk, confined to its roots.
type FS struct {
	disk     filesys.FileSystem
	roots    []string // real paths, symlinks resolved
	rootFDs  []root   // the same, opened: files are opened beneath them
	enforced bool     // the kernel resolves opens beneath the roots (openat2)
	writable []string
	// OnRead, when set, gets every file ReadFile read and returns what kustomize is handed instead.
	OnRead func(path string, data []byte) []byte

	mu      sync.Mutex
	refused []*ConstraintError
}

// New confines reads to roots, each an existing directory (symlinks in their paths resolved once, here).
func New(roots []string) (*FS, error) {
	fs := &FS{disk: filesys.MakeFsOnDisk()}
	for _, dir := range roots {
		if err := fs.addRoot(dir); err != nil {
			return nil, err
		}
	}
	fs.enforced = len(fs.rootFDs) > 0 && kernelEnforced(fs.rootFDs[0])
	return fs, nil
}

func (c *FS) addRoot(dir string) error {
	resolved, err := filepath.EvalSymlinks(Absolute(dir))
	if err != nil {
		return fmt.Errorf("root %s: %w", dir, err)
	}
	if info, err := os.Stat(resolved); err != nil || !info.IsDir() {
		return fmt.Errorf("root %s is not a directory", dir)
	}
	opened, err := openRoot(resolved)
	if err != nil {
		return fmt.Errorf("root %s: %w", dir, err)
	}
	c.roots = append(c.roots, resolved)
	c.rootFDs = append(c.rootFDs, opened)
	return nil
}

// KernelEnforced reports whether every file is opened beneath its root by the kernel (openat2); without it, each
// open follows a check of the path made just before.
func (c *FS) KernelEnforced() bool { return c.enforced }

// Roots are the directories reads are confined to, symlinks resolved.
func (c *FS) Roots() []string { return append([]string(nil), c.roots...) }

// AllowTemporary lets the build read and write below dir (kustomize's clones of remote bases).
func (c *FS) AllowTemporary(dir string) error {
	if err := c.addRoot(dir); err != nil {
		return err
	}
	c.writable = append(c.writable, c.roots[len(c.roots)-1])
	return nil
}

// Refused returns the first refusals of this filesystem, oldest first: kustomize turns some errors into text, and
// refusals through IsDir or Exists return no error at all.
func (c *FS) Refused() []*ConstraintError {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*ConstraintError(nil), c.refused...)
}

// Absolute is path made absolute without cleaning it, so that ".." after a symlink keeps the operating system's
// meaning (the link target's parent) when it is resolved.
func Absolute(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	return wd + string(filepath.Separator) + path
}

// resolve is where the operating system would take path: symlinks of its longest existing prefix followed, the
// rest appended.
func resolve(path string) string {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		return resolved
	}
	cut := strings.LastIndexByte(path, filepath.Separator)
	if cut <= 0 {
		return filepath.Clean(path)
	}
	return filepath.Join(resolve(path[:cut]), path[cut+1:])
}

// within reports whether the clean absolute path is one of dirs or below one.
func within(path string, dirs []string) bool {
	for _, dir := range dirs {
		if path == dir || strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// allowed reports whether both readings of path (lexical first, and the operating system's) stay within dirs.
func allowed(path string, dirs []string) bool {
	whole := Absolute(path)
	return within(resolve(filepath.Clean(whole)), dirs) && within(resolve(whole), dirs)
}

func (c *FS) refuse(op, path string, cause error) *ConstraintError {
	refusal := &ConstraintError{Op: op, Path: path, Err: cause}
	c.mu.Lock()
	if len(c.refused) < maxRecorded {
		c.refused = append(c.refused, refusal)
	}
	c.mu.Unlock()
	return refusal
}

// readable returns nil for a path inside the roots, else the refusal (recorded).
func (c *FS) readable(op, path string) error {
	if !allowed(path, c.roots) {
		return c.refuse(op, path, ErrOutside)
	}
	return nil
}

func (c *FS) writableAt(op, path string) error {
	if !allowed(path, c.writable) {
		return c.refuse(op, path, ErrNotWritable)
	}
	return nil
}

func (c *FS) Create(path string) (filesys.File, error) {
	if err := c.writableAt("Create", path); err != nil {
		return nil, err
	}
	return c.disk.Create(path)
}

func (c *FS) Mkdir(path string) error {
	if err := c.writableAt("Mkdir", path); err != nil {
		return err
	}
	return c.disk.Mkdir(path)
}

func (c *FS) MkdirAll(path string) error {
	if err := c.writableAt("MkdirAll", path); err != nil {
		return err
	}
	return c.disk.MkdirAll(path)
}

func (c *FS) RemoveAll(path string) error {
	if err := c.writableAt("RemoveAll", path); err != nil {
		return err
	}
	return c.disk.RemoveAll(path)
}

func (c *FS) WriteFile(path string, data []byte) error {
	if err := c.writableAt("WriteFile", path); err != nil {
		return err
	}
	return c.disk.WriteFile(path, data)
}

func (c *FS) Open(path string) (filesys.File, error) {
	if err := c.readable("Open", path); err != nil {
		return nil, err
	}
	return c.openBeneath("Open", path, os.O_RDONLY)
}

func (c *FS) ReadFile(path string) ([]byte, error) {
	if err := c.readable("ReadFile", path); err != nil {
		return nil, err
	}
	file, err := c.openBeneath("ReadFile", path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(file)
	if err != nil || c.OnRead == nil {
		return data, err
	}
	return c.OnRead(path, data), nil
}

func (c *FS) ReadDir(path string) ([]string, error) {
	if err := c.readable("ReadDir", path); err != nil {
		return nil, err
	}
	dir, err := c.openBeneath("ReadDir", path, os.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	sort.Strings(names) // as os.ReadDir lists them
	return names, err
}

// stat is os.Stat of a path inside the roots, through a descriptor opened beneath its root.
func (c *FS) stat(op, path string) (os.FileInfo, error) {
	if err := c.readable(op, path); err != nil {
		return nil, err
	}
	file, err := c.openBeneath(op, path, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return file.Stat()
}

func (c *FS) IsDir(path string) bool {
	info, err := c.stat("IsDir", path)
	return err == nil && info.IsDir()
}

func (c *FS) Exists(path string) bool {
	_, err := c.stat("Exists", path)
	return err == nil
}

func (c *FS) CleanedAbs(path string) (filesys.ConfirmedDir, string, error) {
	if err := c.readable("CleanedAbs", path); err != nil {
		return "", "", err
	}
	dir, file, err := c.disk.CleanedAbs(path)
	if err != nil {
		return "", "", err
	}
	if err := c.readable("CleanedAbs", dir.Join(file)); err != nil {
		return "", "", err
	}
	return dir, file, nil
}

// Glob returns only the matches inside the roots.
func (c *FS) Glob(pattern string) ([]string, error) {
	matches, err := c.disk.Glob(pattern)
	if err != nil {
		return nil, err
	}
	kept := matches[:0]
	for _, match := range matches {
		if allowed(match, c.roots) {
			kept = append(kept, match)
		}
	}
	return kept, nil
}

// Walk walks the tree below path, refusing each path outside the roots; what walkFn reads goes through this FS.
func (c *FS) Walk(path string, walkFn filepath.WalkFunc) error {
	if err := c.readable("Walk", path); err != nil {
		return err
	}
	return c.disk.Walk(path, func(visited string, info os.FileInfo, err error) error {
		if refused := c.readable("Walk", visited); refused != nil {
			return refused
		}
		return walkFn(visited, info, err)
	})
}
