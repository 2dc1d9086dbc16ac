package confinedfs

import (
	"errors"
	"fmt"
)

// ErrOutside is the cause of a refused read: the path leaves the build's trees under one of its readings.
var ErrOutside = errors.New("outside the tree the KfDef names")

// ErrNotWritable is the cause of a refused write: builds write only in their temporary directory.
var ErrNotWritable = errors.New("not writable by builds")

// ConstraintError is returned for every path the filesystem refuses. Op is the filesystem method kustomize called
// ("ReadFile", "Create"...), Path the path as kustomize asked for it, Err the cause (ErrOutside, ErrNotWritable, or
// the kernel's refusal at open time).
type ConstraintError struct {
	Op   string
	Path string
	Err  error
}

func (e *ConstraintError) Error() string {
	if errors.Is(e.Err, ErrNotWritable) {
		return fmt.Sprintf("security: writing %q is refused to builds", e.Path)
	}
	return fmt.Sprintf("security: %q is outside the tree the KfDef names; refused", e.Path)
}

func (e *ConstraintError) Unwrap() error { return e.Err }
