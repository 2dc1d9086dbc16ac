package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"kfdef-operator.invalid/kfdef-render/internal/confinedfs"
)

func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func flagsFor(t *testing.T, args ...string) buildFlags {
	t.Helper()
	flags, err := parseBuildFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	return flags
}

func sessionFor(t *testing.T, flags buildFlags) *session {
	t.Helper()
	fs, err := confinedfs.New(flags.roots)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{fs: fs}
	fs.OnRead = s.read
	return s
}

func TestParseBuildFlags(t *testing.T) {
	flags := flagsFor(t, "--root=/a", "--root", "/b", "--load-restrictor=LoadRestrictionsNone", "--kustomize-v3", "p")
	if !reflect.DeepEqual(flags.roots, []string{"/a", "/b"}) || flags.path != "p" || !flags.v3 ||
		flags.options.LoadRestrictions.String() != "LoadRestrictionsNone" || flags.options.PluginConfig.HelmConfig.Enabled {
		t.Errorf("parsed %+v", flags)
	}
	for _, args := range [][]string{{"p"}, {"--root=/a"}, {"--root=/a", "p", "q"}, {"--root=/a", "--bad", "p"},
		{"--root=/a", "--load-restrictor=LoadRestrictionsSomething", "p"}} {
		if _, err := parseBuildFlags(args); err == nil {
			t.Errorf("parseBuildFlags(%q) accepted", args)
		}
	}
}

// kustomize names no file when a kustomization does not decode: causeFirst's reading of its text is pinned here to
// the kustomize API in go.mod.
func TestAKustomizationThatDoesNotDecodeIsNamedFirst(t *testing.T) {
	root := write(t, map[string]string{"app/kustomization.yaml": "resources: [base]\n",
		"app/base/kustomization.yaml": "resources: {not: a list}\n"})
	flags := flagsFor(t, "--root="+root, root+"/app")
	_, err := sessionFor(t, flags).run(flags)
	if err == nil || !strings.HasPrefix(err.Error(), root+"/app/base/kustomization.yaml: invalid Kustomization") {
		t.Errorf("the error is %v", err)
	}
}

func TestAPanicInKustomizeIsRecovered(t *testing.T) {
	root := write(t, map[string]string{"kustomization.yaml": "resources: []\n"})
	flags := flagsFor(t, "--root="+root, root)
	s := sessionFor(t, flags)
	s.fs.OnRead = func(string, []byte) []byte { panic("a bug in kustomize") }
	_, err := s.run(flags)
	var crash *panicError
	if !errors.As(err, &crash) || err.Error() != "kustomize panicked: a bug in kustomize" ||
		!bytes.Contains(crash.stack, []byte("goroutine")) {
		t.Fatalf("run = %v, want the panic as an error with its stack", err)
	}
	var reply answer
	if code := reply.fail(err, s); code != exitPanicked || reply.Error != err.Error() {
		t.Errorf("fail = %d with %q, want exit %d", code, reply.Error, exitPanicked)
	}
}

func TestAFailedBuildNamesTheRefusedPath(t *testing.T) {
	outside := write(t, map[string]string{"secret.txt": "secret"})
	root := write(t, map[string]string{"kustomization.yaml": "configMapGenerator:\n- name: leak\n  files: [s=" +
		outside + "/secret.txt]\n"})
	for _, restrictor := range []string{"LoadRestrictionsRootOnly", "LoadRestrictionsNone"} {
		flags := flagsFor(t, "--root="+root, "--load-restrictor="+restrictor, root)
		s := sessionFor(t, flags)
		_, err := s.run(flags)
		if err == nil {
			t.Fatal("the build read outside its root")
		}
		var reply answer
		if code := reply.fail(err, s); code != exitFailed {
			t.Errorf("exit %d", code)
		}
		want := &violation{Op: "CleanedAbs", Path: outside + "/secret.txt", Kustomization: root + "/kustomization.yaml"}
		if restrictor == "LoadRestrictionsNone" {
			want.Op = "ReadFile"
		}
		if !reflect.DeepEqual(reply.Violation, want) {
			t.Errorf("%s: violation %+v, want %+v", restrictor, reply.Violation, want)
		}
	}
}

func TestTheAnswerIsJSON(t *testing.T) {
	reply := answer{Confinement: "root \a\x00\"é\\", Notes: []string{"<&>"}}
	var out bytes.Buffer
	if err := reply.write(&out); err != nil {
		t.Fatal(err)
	}
	var read map[string]any
	if err := json.Unmarshal(out.Bytes(), &read); err != nil {
		t.Fatalf("%s is not JSON: %v", out.Bytes(), err)
	}
	want := map[string]any{"confinement": reply.Confinement, "notes": []any{"<&>"}, "objects": []any{}}
	if !reflect.DeepEqual(read, want) {
		t.Errorf("read back %v, want %v", read, want)
	}
	failed := answer{Error: "boom", Violation: &violation{Op: "ReadFile", Path: "/p"}}
	out.Reset()
	if err := failed.write(&out); err != nil {
		t.Fatal(err)
	}
	if want := `{"confinement":"","notes":[],"objects":null,"error":"boom","violation":{"op":"ReadFile","path":"/p"}}` +
		"\n"; out.String() != want {
		t.Errorf("failure answer %s, want %s", out.String(), want)
	}
}

// kustomize quotes the text of a component's error again (v5.8.2): the refusal is found by its path.
func TestARefusalInAComponentIsNamed(t *testing.T) {
	outside := write(t, map[string]string{"secret.txt": "secret"})
	root := write(t, map[string]string{"app/kustomization.yaml": "components: [../common]\n",
		"common/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n" +
			"configMapGenerator:\n- name: leak\n  files: [" + outside + "/secret.txt]\n"})
	flags := flagsFor(t, "--root="+root, root+"/app")
	s := sessionFor(t, flags)
	_, err := s.run(flags)
	var reply answer
	reply.fail(err, s)
	if reply.Violation == nil || reply.Violation.Path != outside+"/secret.txt" {
		t.Errorf("violation %+v for %v", reply.Violation, err)
	}
}
