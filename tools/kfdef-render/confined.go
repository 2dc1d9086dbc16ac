package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// confinedFS is the filesystem kustomize builds on: reads only inside the roots, writes only in an allowed
// temporary directory (where remote bases are cloned, when they are allowed), and nothing else. A path is
// inside only if every way of reading it stays inside: kustomize's (cleaned lexically, then symlinks followed)
// and the operating system's (".." after a symlink means the link target's parent).
type confinedFS struct {
	disk     filesys.FileSystem
	roots    []string // real paths, symlinks resolved
	writable []string
	v3       *v3Reader // kustomizations read as kustomize v3.2 read them (nil: as they are)
	// lastKustomization is the kustomization file read last: kustomize names none in its decoding errors.
	lastKustomization string
}

// errOutside is returned for every path outside the roots; its text names the path as kustomize asked for it.
type errOutside struct{ path string }

func (e *errOutside) Error() string {
	return fmt.Sprintf("security: %q is outside the tree the KfDef names; refused", e.path)
}

func newConfinedFS(roots []string) (*confinedFS, error) {
	fs := &confinedFS{disk: filesys.MakeFsOnDisk()}
	for _, root := range roots {
		real, err := filepath.EvalSymlinks(absolute(root))
		if err != nil {
			return nil, fmt.Errorf("root %s: %w", root, err)
		}
		if info, err := os.Stat(real); err != nil || !info.IsDir() {
			return nil, fmt.Errorf("root %s is not a directory", root)
		}
		fs.roots = append(fs.roots, real)
	}
	return fs, nil
}

// allowTemporary lets the build read and write below dir (kustomize's clones of remote bases).
func (c *confinedFS) allowTemporary(dir string) {
	if real, err := filepath.EvalSymlinks(absolute(dir)); err == nil {
		c.roots = append(c.roots, real)
		c.writable = append(c.writable, real)
	}
}

// resolve is where the operating system would take path: symlinks of its longest existing prefix followed,
// the rest appended.
func resolve(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	cut := strings.LastIndexByte(path, filepath.Separator)
	if cut <= 0 {
		return filepath.Clean(path)
	}
	return filepath.Join(resolve(path[:cut]), path[cut+1:])
}

func within(path string, dirs []string) bool {
	for _, dir := range dirs {
		if path == dir || strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func (c *confinedFS) allowed(path string, dirs []string) bool {
	whole := absolute(path)
	return within(resolve(filepath.Clean(whole)), dirs) && within(resolve(whole), dirs)
}

func (c *confinedFS) readable(path string) error {
	if !c.allowed(path, c.roots) {
		return &errOutside{path}
	}
	return nil
}

func (c *confinedFS) writableAt(path string) error {
	if !c.allowed(path, c.writable) {
		return fmt.Errorf("security: writing %q is refused to builds", path)
	}
	return nil
}

func (c *confinedFS) Create(path string) (filesys.File, error) {
	if err := c.writableAt(path); err != nil {
		return nil, err
	}
	return c.disk.Create(path)
}

func (c *confinedFS) Mkdir(path string) error {
	if err := c.writableAt(path); err != nil {
		return err
	}
	return c.disk.Mkdir(path)
}

func (c *confinedFS) MkdirAll(path string) error {
	if err := c.writableAt(path); err != nil {
		return err
	}
	return c.disk.MkdirAll(path)
}

func (c *confinedFS) RemoveAll(path string) error {
	if err := c.writableAt(path); err != nil {
		return err
	}
	return c.disk.RemoveAll(path)
}

func (c *confinedFS) WriteFile(path string, data []byte) error {
	if err := c.writableAt(path); err != nil {
		return err
	}
	return c.disk.WriteFile(path, data)
}

func (c *confinedFS) Open(path string) (filesys.File, error) {
	if err := c.readable(path); err != nil {
		return nil, err
	}
	return c.disk.Open(path)
}

func (c *confinedFS) ReadFile(path string) ([]byte, error) {
	if err := c.readable(path); err != nil {
		return nil, err
	}
	data, err := c.disk.ReadFile(path)
	if isKustomizationFile(path) {
		c.lastKustomization = path
	}
	if err != nil || c.v3 == nil {
		return data, err
	}
	return c.v3.read(path, data), nil
}

func (c *confinedFS) ReadDir(path string) ([]string, error) {
	if err := c.readable(path); err != nil {
		return nil, err
	}
	return c.disk.ReadDir(path)
}

func (c *confinedFS) IsDir(path string) bool {
	return c.readable(path) == nil && c.disk.IsDir(path)
}

func (c *confinedFS) Exists(path string) bool {
	return c.readable(path) == nil && c.disk.Exists(path)
}

func (c *confinedFS) CleanedAbs(path string) (filesys.ConfirmedDir, string, error) {
	if err := c.readable(path); err != nil {
		return "", "", err
	}
	dir, file, err := c.disk.CleanedAbs(path)
	if err != nil {
		return "", "", err
	}
	if err := c.readable(dir.Join(file)); err != nil {
		return "", "", err
	}
	return dir, file, nil
}

// Glob returns only the matches inside the roots.
func (c *confinedFS) Glob(pattern string) ([]string, error) {
	matches, err := c.disk.Glob(pattern)
	if err != nil {
		return nil, err
	}
	kept := matches[:0]
	for _, match := range matches {
		if c.readable(match) == nil {
			kept = append(kept, match)
		}
	}
	return kept, nil
}

func (c *confinedFS) Walk(path string, walkFn filepath.WalkFunc) error {
	if err := c.readable(path); err != nil {
		return err
	}
	return c.disk.Walk(path, walkFn)
}
