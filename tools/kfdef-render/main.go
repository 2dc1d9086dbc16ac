// kfdef-render builds one kustomization with kustomize's own Go API (krusty) inside a boundary that kustomize
// itself cannot cross: every file it reads goes through a filesystem confined to the trees named with --root,
// every network dial is refused unless --allow-remote is given, and with no PATH no git or other program can be
// started. Where the kernel offers Landlock, the process also loses the right to read anything else and to open
// TCP connections. Checks made by another program beforehand can disagree with how kustomize decodes a file
// (keys matched case-insensitively, duplicate keys, YAML tags); here the reader is kustomize, so they cannot.
//
//	kfdef-render version
//	kfdef-render build --root DIR [--root DIR]... [--load-restrictor LoadRestrictionsRootOnly|LoadRestrictionsNone]
//	                   [--allow-remote] [--no-landlock] [--kustomize-v3] PATH
//
// --kustomize-v3 reads the tree's kustomizations and transformer configurations as kfctl's kustomize v3.2 read
// them (v3compat.go). build writes one JSON object to stdout: {"confinement": "...", "notes": [...],
// "objects": [...]}, objects in kustomize's output order, notes naming each field dropped for v3.2. On failure it writes "Error: ..." to stderr first, then kustomize's warnings, and exits 1. Exit code 2 is
// a usage error.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
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
		"[--load-restrictor R] [--allow-remote] [--no-landlock] [--kustomize-v3] PATH\n", problem)
	os.Exit(2)
}

func build(args []string) int {
	flags := flag.NewFlagSet("build", flag.ContinueOnError)
	var roots rootList
	flags.Var(&roots, "root", "a directory the build may read (repeatable)")
	restrictor := flags.String("load-restrictor", types.LoadRestrictionsRootOnly.String(), "kustomize's load restrictor")
	allowRemote := flags.Bool("allow-remote", false, "let kustomize fetch remote bases and URLs")
	noLandlock := flags.Bool("no-landlock", false, "do not ask the kernel for Landlock")
	v3 := flags.Bool("kustomize-v3", false, "read kustomizations as kustomize v3.2 did (kfctl's trees)")
	if err := flags.Parse(args); err != nil || flags.NArg() != 1 || len(roots) == 0 {
		usage("build needs at least one --root and exactly one PATH")
	}
	options := krusty.MakeDefaultOptions()
	switch *restrictor {
	case types.LoadRestrictionsRootOnly.String():
		options.LoadRestrictions = types.LoadRestrictionsRootOnly
	case types.LoadRestrictionsNone.String():
		options.LoadRestrictions = types.LoadRestrictionsNone
	default:
		usage("unknown load restrictor " + *restrictor)
	}
	// The CLI's own defaults: builtin plugins only (no exec, container or Go plugins), helm off, and the
	// order of the kustomization (or its sortOptions).
	options.PluginConfig = types.DisabledPluginConfig()
	options.PluginConfig.HelmConfig.Enabled = false
	options.Reorder = krusty.ReorderOptionUnspecified

	var warnings bytes.Buffer
	log.SetOutput(&warnings) // kustomize's deprecation notes come after an error, never before it
	log.SetFlags(0)

	fsys, err := newConfinedFS(roots)
	if err != nil {
		return fail(err, &warnings)
	}
	if *v3 {
		fsys.v3 = newV3Reader()
	}
	confinement := "network refused in process"
	if *allowRemote {
		confinement = "remote bases allowed"
		if tmp := os.Getenv("TMPDIR"); tmp != "" {
			fsys.allowTemporary(tmp) // where kustomize clones remote bases
		}
	} else {
		refuseNetwork()
		// No program can be found, so kustomize's git cloner (and anything else) cannot start one.
		os.Setenv("PATH", "")
	}
	if *noLandlock {
		confinement += "; landlock not requested"
	} else {
		confinement += "; " + restrictWithLandlock(fsys.roots, *allowRemote)
	}

	resources, err := krusty.MakeKustomizer(options).Run(fsys, flags.Arg(0))
	// Read as v3.2 did, a namespace fieldSpec reaching a list leaves it as it is: build again without it.
	for attempt := 0; err != nil && fsys.v3 != nil && attempt < maxBuildAttempts && fsys.v3.skipListNamespaceSpec(err); attempt++ {
		resources, err = krusty.MakeKustomizer(options).Run(fsys, flags.Arg(0))
	}
	if err != nil {
		// A kustomization that does not decode fails the build right after it is read; kustomize names none, and
		// wraps the cause in the accumulation chain that led there. The cause first, with its file.
		if cause := strings.Index(err.Error(), "invalid Kustomization"); cause >= 0 && fsys.lastKustomization != "" {
			err = fmt.Errorf("%s: %s", fsys.lastKustomization, err.Error()[cause:])
		}
		return fail(err, &warnings)
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	notes := []string{}
	if fsys.v3 != nil {
		notes = append(notes, fsys.v3.notes...)
	}
	encodedNotes, _ := json.Marshal(notes)
	fmt.Fprintf(out, `{"confinement":%q,"notes":%s,"objects":[`, confinement, encodedNotes)
	for i, resource := range resources.Resources() {
		data, err := resource.MarshalJSON()
		if err != nil {
			return fail(fmt.Errorf("encoding %s as JSON: %w", resource.CurId(), err), &warnings)
		}
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(data)
	}
	out.WriteString("]}\n")
	if err := out.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: writing the output: %v\n", err)
		return 1
	}
	io.Copy(os.Stderr, &warnings)
	return 0
}

func fail(err error, warnings *bytes.Buffer) int {
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	io.Copy(os.Stderr, warnings)
	return 1
}

// errNetworkRefused is what every dial of this process returns when remote bases are not allowed.
var errNetworkRefused = errors.New("network access is refused to builds (remote bases and URLs are not allowed)")

// refuseNetwork makes every HTTP request of the process fail before it dials: kustomize fetches remote files
// with an http.Client on the default transport.
func refuseNetwork() {
	refused := &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errNetworkRefused
		},
	}
	http.DefaultTransport = refused
	http.DefaultClient.Transport = refused
}

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

// absolute is path made absolute without cleaning it, so that ".." after a symlink keeps the operating
// system's meaning (the link target's parent) when it is resolved.
func absolute(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	return wd + string(filepath.Separator) + path
}
