package v3compat

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// readingFS hands kustomize each file as reader reads it, as kfdef-render's confined filesystem does.
type readingFS struct {
	filesys.FileSystem
	reader *Reader
}

func (r readingFS) ReadFile(path string) ([]byte, error) {
	data, err := r.FileSystem.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return r.reader.Read(path, data), nil
}

func inMemory(t *testing.T, files map[string]string) filesys.FileSystem {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for path, text := range files {
		if err := fs.WriteFile(path, []byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	return fs
}

// operatorGroupTree is kfctl-era: a namespace fieldSpec of a transformer configuration reaches a list.
var operatorGroupTree = map[string]string{
	"/app/kustomization.yaml": "namespace: kubeflow\nresources: [og.yaml]\nconfigurations: [config.yaml]\n",
	"/app/config.yaml":        "namespace:\n- kind: OperatorGroup\n  path: spec/targetNamespaces\n",
	"/app/og.yaml": "apiVersion: operators.coreos.com/v1\nkind: OperatorGroup\nmetadata: {name: og}\n" +
		"spec: {targetNamespaces: [a]}\n",
}

// The error text SkipListNamespaceSpec reads is kustomize's: this test pins it to the kustomize API in go.mod.
func TestSkipListNamespaceSpecReadsThePinnedKustomizesError(t *testing.T) {
	reader := NewReader()
	fs := readingFS{inMemory(t, operatorGroupTree), reader}
	kustomizer := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	_, err := kustomizer.Run(fs, "/app")
	if err == nil || !reader.SkipListNamespaceSpec(err) {
		t.Fatalf("the first build failed with %v; want the namespace fieldSpec on a list recognised", err)
	}
	if reader.SkipListNamespaceSpec(err) {
		t.Error("the same fieldSpec is worth one more build only")
	}
	resources, err := kustomizer.Run(fs, "/app")
	if err != nil {
		t.Fatalf("the build without the fieldSpec: %v", err)
	}
	object := resources.Resources()[0]
	if object.GetNamespace() != "kubeflow" {
		t.Errorf("namespace = %q", object.GetNamespace())
	}
	if list, _ := object.GetSlice("spec.targetNamespaces"); !reflect.DeepEqual(list, []any{"a"}) {
		t.Errorf("targetNamespaces = %v, want it left as it was", list)
	}
	want := []string{"/app/config.yaml: namespace fieldSpec spec/targetNamespaces of OperatorGroup dropped from the " +
		"transformer configuration: it reaches a list, which kustomize v3.2 left as it was and v5 refuses"}
	if !reflect.DeepEqual(reader.Notes(), want) {
		t.Errorf("Notes() = %q, want %q", reader.Notes(), want)
	}
	if NewReader().SkipListNamespaceSpec(errors.New("accumulating resources: missing.yaml")) {
		t.Error("another error is not a namespace fieldSpec")
	}
}

func TestReadDropsWhatOnlyV32KnewAndNotesIt(t *testing.T) {
	reader := NewReader()
	kept := []byte("resources: [a.yaml]\n")
	if got := reader.Read("/t/kustomization.yaml", kept); !reflect.DeepEqual(got, kept) {
		t.Errorf("a kustomization v5 reads changed: %q", got)
	}
	got := reader.Read("/t/kustomization.yaml", []byte("resources: [a.yaml]\nInventory: {type: ConfigMap}\n"+
		"configurations: [conf/config.yaml]\n"))
	if strings.Contains(string(got), "nventory") || !strings.Contains(string(got), "a.yaml") {
		t.Errorf("the kustomization handed over is %s", got)
	}
	config := []byte("commonLabels:\n- path: metadata/labels\n  create: true\n  unknown: x\nvarReference: []\n")
	if got := reader.Read("/t/other.yaml", config); !reflect.DeepEqual(got, config) {
		t.Errorf("a file no kustomization names as a configuration changed: %q", got)
	}
	got = reader.Read("/t/conf/config.yaml", config)
	if strings.Contains(string(got), "unknown") || !strings.Contains(string(got), "metadata/labels") {
		t.Errorf("the configuration handed over is %s", got)
	}
	want := []string{
		"/t/kustomization.yaml: Inventory dropped from the kustomization: kustomize v3.2 knew this field (kfctl " +
			"never used it), v5 removed it",
		"/t/conf/config.yaml: commonLabels[0].unknown dropped from the transformer configuration: kustomize v3.2 " +
			"ignored this field, v5 refuses it",
	}
	reader.Read("/t/conf/config.yaml", config) // noted once
	if !reflect.DeepEqual(reader.Notes(), want) {
		t.Errorf("Notes() = %q, want %q", reader.Notes(), want)
	}
}

func TestDroppedFields(t *testing.T) {
	for _, test := range []struct {
		name          string
		written, kept any
		want          []string
	}{
		{"nothing dropped", map[string]any{"a": "x"}, map[string]any{"a": "x"}, nil},
		{"a key kept in another case", map[string]any{"A": "x"}, map[string]any{"a": "x"}, nil},
		{"an unknown key", map[string]any{"a": "x", "b": "y"}, map[string]any{"a": "x"}, []string{"b"}},
		{"an empty unknown value", map[string]any{"b": ""}, map[string]any{}, nil},
		{"nested in a list", map[string]any{"l": []any{map[string]any{"p": "x", "q": 1.0}}},
			map[string]any{"l": []any{map[string]any{"p": "x"}}}, []string{"l[0].q"}},
		{"lists of other lengths are not compared", map[string]any{"l": []any{map[string]any{"q": 1.0}}},
			map[string]any{"l": []any{}}, nil},
		{"in key order", map[string]any{"z": true, "m": 1.0, "a": []any{1.0}}, map[string]any{},
			[]string{"a", "m", "z"}},
	} {
		var got []string
		droppedFields(test.written, test.kept, "", &got)
		if !reflect.DeepEqual(got, test.want) {
			t.Errorf("%s: droppedFields = %q, want %q", test.name, got, test.want)
		}
	}
}

func TestIsKustomizationFile(t *testing.T) {
	for path, want := range map[string]bool{"/a/kustomization.yaml": true, "kustomization.yml": true,
		"/a/Kustomization": true, "/a/kustomization.json": false, "/kustomization.yaml/x.yaml": false} {
		if got := IsKustomizationFile(path); got != want {
			t.Errorf("IsKustomizationFile(%q) = %v, want %v", path, got, want)
		}
	}
}
