// kfdef-render builds one kustomization with kustomize's own Go API (krusty) inside a boundary that kustomize
// itself cannot cross: every file it reads goes through a filesystem confined to the trees named with --root
// (internal/confinedfs: each file opened beneath its tree's descriptor, so the kernel refuses it if the tree changed
// since the check), every network dial is refused unless --remote-proxy is given, and with no PATH no git or
// other program can be started. Where the kernel offers Landlock, the process also loses the right to read
// anything else and to open TCP connections. With --remote-proxy (remote bases allowed), every connection of the
// process and of git goes through that proxy, the operator's, which applies its address policy (network.go), git
// speaks https or http only, and clones go to a directory of this build alone. Checks made by another program beforehand can disagree with how
// kustomize decodes a file (keys matched case-insensitively, duplicate keys, YAML tags); here the reader is
// kustomize, so they cannot.
//
//	kfdef-render version
//	kfdef-render build --root DIR [--root DIR]... [--load-restrictor LoadRestrictionsRootOnly|LoadRestrictionsNone]
//	                   [--remote-proxy http://127.0.0.1:PORT] [--no-landlock] [--kustomize-v3] PATH
//
// --kustomize-v3 reads the tree's kustomizations and transformer configurations as kfctl's kustomize v3.2 read
// them (internal/v3compat). build writes one JSON object to stdout (answer): the objects in kustomize's output
// order, the notes naming each field dropped for v3.2, and how the process was confined; or, when the build
// fails, the error and the refused path if the boundary refused one. Exit codes: 0 built, 1 the build failed
// ("Error: ..." on stderr too, then kustomize's warnings), 2 a usage error (also Go's own fatal errors, which
// cannot be recovered), 3 kustomize panicked (recovered; the stack follows on stderr).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"runtime/debug"
	"strings"

	"kfdef-operator.invalid/kfdef-render/internal/confinedfs"
	"kfdef-operator.invalid/kfdef-render/internal/v3compat"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
)

// Exit codes of build.
const (
	exitBuilt    = 0
	exitFailed   = 1
	exitUsage    = 2
	exitPanicked = 3
)

// maxBuildAttempts bounds the builds of one tree read as v3.2 (one more per namespace fieldSpec found on a list).
const maxBuildAttempts = 16

// kustomizeRelease is the kustomize CLI release whose API this program is built on; set by the build script.
var kustomizeRelease = "unknown"

type rootList []string

func (r *rootList) String() string     { return strings.Join(*r, ",") }
func (r *rootList) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	if len(os.Args) < 2 {
		usage("missing command")
	}
	switch os.Args[1] {
	case "version":
		fmt.Printf("%s kustomize-api=%s %s\n", kustomizeRelease, moduleVersion("sigs.k8s.io/kustomize/api"),
			goVersion())
	case "build":
		os.Exit(build(os.Args[2:]))
	default:
		usage("unknown command " + os.Args[1])
	}
}

func usage(problem string) {
	fmt.Fprintf(os.Stderr, "kfdef-render: %s\nusage: kfdef-render version | kfdef-render build --root DIR... "+
		"[--load-restrictor R] [--remote-proxy URL] [--no-landlock] [--kustomize-v3] PATH\n", problem)
	os.Exit(exitUsage)
}

// buildFlags are the arguments of build.
type buildFlags struct {
	roots       []string
	options     *krusty.Options
	remoteProxy *url.URL // nil: remote bases refused
	noLandlock  bool
	v3          bool
	path        string
}

func parseBuildFlags(args []string) (buildFlags, error) {
	flags := flag.NewFlagSet("build", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	var roots rootList
	flags.Var(&roots, "root", "a directory the build may read (repeatable)")
	restrictor := flags.String("load-restrictor", types.LoadRestrictionsRootOnly.String(), "kustomize's load restrictor")
	remoteProxy := flags.String("remote-proxy", "", "let kustomize fetch remote bases and URLs through this proxy")
	noLandlock := flags.Bool("no-landlock", false, "do not ask the kernel for Landlock")
	v3 := flags.Bool("kustomize-v3", false, "read kustomizations as kustomize v3.2 did (kfctl's trees)")
	if err := flags.Parse(args); err != nil || flags.NArg() != 1 || len(roots) == 0 {
		return buildFlags{}, errors.New("build needs at least one --root and exactly one PATH")
	}
	options := krusty.MakeDefaultOptions()
	switch *restrictor {
	case types.LoadRestrictionsRootOnly.String():
		options.LoadRestrictions = types.LoadRestrictionsRootOnly
	case types.LoadRestrictionsNone.String():
		options.LoadRestrictions = types.LoadRestrictionsNone
	default:
		return buildFlags{}, fmt.Errorf("unknown load restrictor %s", *restrictor)
	}
	var proxy *url.URL
	if *remoteProxy != "" {
		parsed, err := loopbackProxy(*remoteProxy)
		if err != nil {
			return buildFlags{}, err
		}
		proxy = parsed
	}
	// The CLI's own defaults: builtin plugins only (no exec, container or Go plugins), helm off, and the
	// order of the kustomization (or its sortOptions).
	options.PluginConfig = types.DisabledPluginConfig()
	options.PluginConfig.HelmConfig.Enabled = false
	options.Reorder = krusty.ReorderOptionUnspecified
	return buildFlags{roots: roots, options: options, remoteProxy: proxy, noLandlock: *noLandlock, v3: *v3,
		path: flags.Arg(0)}, nil
}

// build is the build command: its exit code.
func build(args []string) int {
	flags, err := parseBuildFlags(args)
	if err != nil {
		usage(err.Error())
	}
	var warnings bytes.Buffer
	log.SetOutput(&warnings) // kustomize's deprecation notes come after an error, never before it
	log.SetFlags(0)

	var reply answer
	s, err := confine(flags)
	defer s.close()
	if err == nil {
		reply.Confinement = s.confinement
		var resources resmap.ResMap
		resources, err = s.run(flags)
		if err == nil {
			reply.Objects, err = encodeObjects(resources)
		}
		reply.Notes = s.notes()
	}
	code := exitBuilt
	if err != nil {
		code = reply.fail(err, s)
	}
	if _, copyErr := io.Copy(os.Stderr, &warnings); copyErr != nil && code == exitBuilt {
		code = reply.fail(fmt.Errorf("writing kustomize's warnings to stderr: %w", copyErr), s)
	}
	if writeErr := reply.write(os.Stdout); writeErr != nil {
		fmt.Fprintf(os.Stderr, "Error: writing the answer: %v\n", writeErr)
		return exitFailed
	}
	return code
}

// session is one build's confinement: the filesystem, the v3.2 reader and what the process achieved.
type session struct {
	fs          *confinedfs.FS
	v3          *v3compat.Reader
	confinement string
	clones      string // the directory kustomize clones remote bases into ("" when they are refused)
	// lastKustomization is the kustomization file read last: kustomize names none in its decoding errors.
	lastKustomization string
}

func confine(flags buildFlags) (*session, error) {
	fs, err := confinedfs.New(flags.roots)
	if err != nil {
		return nil, err
	}
	s := &session{fs: fs, confinement: "network refused in process"}
	if flags.v3 {
		s.v3 = v3compat.NewReader()
	}
	fs.OnRead = s.read
	if flags.remoteProxy != nil {
		s.confinement = "remote bases allowed, through the render's proxy"
		clones, err := s.cloneDirectory()
		if err != nil {
			return nil, err
		}
		if err := fs.AllowTemporary(clones); err != nil {
			return nil, err
		}
		if err := throughProxy(flags.remoteProxy); err != nil {
			return nil, err
		}
	} else {
		refuseNetwork()
		// No program can be found, so kustomize's git cloner (and anything else) cannot start one.
		if err := os.Setenv("PATH", ""); err != nil {
			return nil, fmt.Errorf("clearing PATH: %w", err)
		}
	}
	if flags.noLandlock {
		s.confinement += "; landlock not requested"
	} else {
		s.confinement += "; " + restrictWithLandlock(fs.Roots(), flags.remoteProxy != nil)
	}
	if !fs.KernelEnforced() {
		s.confinement += "; no openat2: each file is opened after a check of its path, not beneath its tree"
	}
	return s, nil
}

// cloneDirectory makes a directory of this build alone below $TMPDIR and points TMPDIR at it: kustomize clones
// remote bases into a new directory of TMPDIR, and the build may read and write only there (besides its trees).
func (s *session) cloneDirectory() (string, error) {
	dir, err := os.MkdirTemp(os.Getenv("TMPDIR"), "kfdef-render-clones-")
	if err != nil {
		return "", fmt.Errorf("a directory for remote bases: %w", err)
	}
	s.clones = dir
	if err := os.Setenv("TMPDIR", dir); err != nil {
		return "", fmt.Errorf("setting TMPDIR: %w", err)
	}
	return dir, nil
}

// close removes what the build cloned.
func (s *session) close() {
	if s != nil && s.clones != "" {
		os.RemoveAll(s.clones)
	}
}

// read is the filesystem's OnRead: it notes the kustomization read last and hands v3.2 trees over as v5 reads them.
func (s *session) read(path string, data []byte) []byte {
	if v3compat.IsKustomizationFile(path) {
		s.lastKustomization = path
	}
	if s.v3 == nil {
		return data
	}
	return s.v3.Read(path, data)
}

func (s *session) notes() []string {
	if s.v3 == nil {
		return []string{}
	}
	return s.v3.Notes()
}

// run builds flags.path, again without each namespace fieldSpec found on a list when the tree is read as v3.2.
func (s *session) run(flags buildFlags) (resmap.ResMap, error) {
	resources, err := kustomize(flags.options, s.fs, flags.path)
	for attempt := 0; err != nil && s.v3 != nil && attempt < maxBuildAttempts && s.v3.SkipListNamespaceSpec(err); attempt++ {
		resources, err = kustomize(flags.options, s.fs, flags.path)
	}
	if err != nil {
		return nil, causeFirst(err, s.lastKustomization)
	}
	return resources, nil
}

// panicError is a panic of kustomize's, recovered.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("kustomize panicked: %v", e.value) }

// kustomize runs one build; a panic in it comes back as a *panicError.
func kustomize(options *krusty.Options, fs *confinedfs.FS, path string) (resources resmap.ResMap, err error) {
	defer func() {
		if value := recover(); value != nil {
			resources, err = nil, &panicError{value: value, stack: debug.Stack()}
		}
	}()
	return krusty.MakeKustomizer(options).Run(fs, path)
}

// causeFirst puts first, with its file, the cause of a build that failed on a kustomization that does not decode:
// kustomize names no file, and wraps the cause in the accumulation chain that led there.
func causeFirst(err error, lastKustomization string) error {
	cause := strings.Index(err.Error(), "invalid Kustomization")
	if cause < 0 || lastKustomization == "" {
		return err
	}
	return &reworded{text: fmt.Sprintf("%s: %s", lastKustomization, err.Error()[cause:]), err: err}
}

// reworded is an error with other text, still unwrapping to what it rewords.
type reworded struct {
	text string
	err  error
}

func (r *reworded) Error() string { return r.text }
func (r *reworded) Unwrap() error { return r.err }

func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "go?"
}
