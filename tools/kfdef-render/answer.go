package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"kfdef-operator.invalid/kfdef-render/internal/confinedfs"

	"sigs.k8s.io/kustomize/api/resmap"
)

// answer is what build writes to stdout, the whole protocol with the operator (kfdef_operator/build/kustomize.py
// parse_output): a built tree's objects, or why the build failed.
type answer struct {
	// Confinement says how the process was confined, for the render's log line.
	Confinement string `json:"confinement"`
	// Notes name each field dropped to read a kustomization as kustomize v3.2 did.
	Notes []string `json:"notes"`
	// Objects are the built objects in kustomize's output order.
	Objects []json.RawMessage `json:"objects"`
	// Error is set when the build failed, Violation too when the boundary refused a path on the way.
	Error     string     `json:"error,omitempty"`
	Violation *violation `json:"violation,omitempty"`
}

// violation is a path the confined filesystem refused during a failed build.
type violation struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// Kustomization is the kustomization file read last before the refusal (it may not be the one naming Path).
	Kustomization string `json:"kustomization,omitempty"`
}

// fail turns the answer into a failure because of err, writes "Error: ..." (and a panic's stack) to stderr for
// whoever reads it, and returns the exit code.
func (a *answer) fail(err error, s *session) int {
	a.Objects = nil
	a.Error = err.Error()
	if s != nil {
		if refused := s.refusalBehind(err); refused != nil {
			a.Violation = &violation{Op: refused.Op, Path: refused.Path, Kustomization: s.lastKustomization}
		}
	}
	fmt.Fprintf(os.Stderr, "Error: %s\n", a.Error)
	var crash *panicError
	if errors.As(err, &crash) {
		os.Stderr.Write(crash.stack)
		return exitPanicked
	}
	return exitFailed
}

// refusalBehind is the refusal of the boundary that made the build fail: the one err wraps, else the first one
// whose path err's text names (kustomize turns some errors into text, quoted again on the way).
func (s *session) refusalBehind(err error) *confinedfs.ConstraintError {
	var refused *confinedfs.ConstraintError
	if errors.As(err, &refused) {
		return refused
	}
	for _, candidate := range s.fs.Refused() {
		if strings.Contains(err.Error(), candidate.Path) {
			return candidate
		}
	}
	return nil
}

func (a *answer) write(out io.Writer) error {
	if a.Notes == nil {
		a.Notes = []string{}
	}
	if a.Objects == nil && a.Error == "" {
		a.Objects = []json.RawMessage{}
	}
	buffered := bufio.NewWriterSize(out, 1<<20)
	encoder := json.NewEncoder(buffered)
	encoder.SetEscapeHTML(false) // the objects' bytes as kustomize wrote them
	if err := encoder.Encode(a); err != nil {
		return err
	}
	return buffered.Flush()
}

// encodeObjects encodes each resource as JSON, in order.
func encodeObjects(resources resmap.ResMap) ([]json.RawMessage, error) {
	objects := make([]json.RawMessage, 0, resources.Size())
	for _, resource := range resources.Resources() {
		data, err := resource.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encoding %s as JSON: %w", resource.CurId(), err)
		}
		objects = append(objects, data)
	}
	return objects, nil
}
