// Package v3compat reads the kustomizations and transformer configurations of a tree written for kfctl's kustomize
// v3.2 as kustomize v5 accepts them, with the meaning v3.2 gave them (see Reader).
package v3compat

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// Reader hands kustomize v5 the kustomizations and transformer configurations of a tree written for kfctl's
// kustomize v3.2 in the form v5 accepts, with the meaning v3.2 gave them (sigs.k8s.io/kustomize/v3 v3.2.0):
//
//   - transformer configurations: v3.2 decoded them without refusing unknown fields
//     (pkg/transformers/config/factory.go, yaml.Unmarshal), v5 refuses them (builtinconfig, UnmarshalStrict). They
//     are decoded here into kustomize's own field types the v3.2 way, unknown fields dropped.
//   - kustomizations: v3.2 refused unknown fields too (pkg/target/kusttarget.go, DisallowUnknownFields), but knew
//     fields v5 no longer has: those of v3Kustomization beyond v5's own type. They are dropped; a field neither
//     knew is left for v5 to refuse, as v3.2 refused it.
//
// When a file loses a field it is handed over re-encoded, and the field is noted; a file v5 reads as it is
// reaches it unchanged.
type Reader struct {
	configurations map[string]bool // transformer configurations named by the kustomizations read so far
	notes          []string
	noted          map[string]bool
	// listNamespaceSpecs holds "Kind|path" of namespace fieldSpecs found to reach a list (see SkipListNamespaceSpec).
	listNamespaceSpecs map[string]bool
}

// NewReader returns a Reader that has read nothing yet.
func NewReader() *Reader {
	return &Reader{configurations: map[string]bool{}, noted: map[string]bool{}, listNamespaceSpecs: map[string]bool{}}
}

var nonScalarNamespaceSpec = regexp.MustCompile(
	`namespace field specs must target scalar nodes: considering field '([^']+)' of object ([A-Za-z0-9]+)\.`)

// SkipListNamespaceSpec reads a failed build's error: a namespace fieldSpec of a transformer configuration that
// reaches a list (an OperatorGroup's spec/targetNamespaces). v3.2 left such a value as it was (its namespace
// transformer changes strings and the default ServiceAccount's subjects only); v5 refuses it. It returns true when
// the fieldSpec is new, so that a build without it is worth trying.
func (r *Reader) SkipListNamespaceSpec(err error) bool {
	found := nonScalarNamespaceSpec.FindStringSubmatch(err.Error())
	if found == nil {
		return false
	}
	key := found[2] + "|" + found[1]
	if r.listNamespaceSpecs[key] {
		return false
	}
	r.listNamespaceSpecs[key] = true
	return true
}

// withoutListNamespaceSpecs removes from config the namespace fieldSpecs known to reach a list; true if it did.
func (r *Reader) withoutListNamespaceSpecs(path string, config *v3TransformerConfig) bool {
	kept := config.NameSpace[:0]
	var removed []string
	for _, spec := range config.NameSpace {
		if r.listNamespaceSpecs[spec.Kind+"|"+spec.Path] {
			removed = append(removed, fmt.Sprintf("namespace fieldSpec %s of %s", spec.Path, spec.Kind))
			continue
		}
		kept = append(kept, spec)
	}
	config.NameSpace = kept
	r.note(path, removed, "the transformer configuration: it reaches a list, which kustomize v3.2 left as it "+
		"was and v5 refuses")
	return len(removed) > 0
}

// v3Kustomization is kustomize v5's kustomization with the fields of v3.2's that v5 removed.
type v3Kustomization struct {
	types.Kustomization `json:",inline"`
	// Inventory recorded the objects of a build for kustomize's pruning (removed in v4).
	Inventory any `json:"inventory,omitempty"`
}

// v3TransformerConfig mirrors kustomize's transformer configuration (api/internal/plugins/builtinconfig, which
// cannot be imported) with its public field types.
type v3TransformerConfig struct {
	NamePrefix                types.FsSlice     `json:"namePrefix,omitempty"`
	NameSuffix                types.FsSlice     `json:"nameSuffix,omitempty"`
	NameSpace                 types.FsSlice     `json:"namespace,omitempty"`
	CommonLabels              types.FsSlice     `json:"commonLabels,omitempty"`
	Labels                    types.FsSlice     `json:"labels,omitempty"`
	TemplateLabels            types.FsSlice     `json:"templateLabels,omitempty"`
	VolumeClaimTemplateLabels types.FsSlice     `json:"volumeClaimTemplateLabels,omitempty"`
	CommonAnnotations         types.FsSlice     `json:"commonAnnotations,omitempty"`
	NameReference             []v3NameReference `json:"nameReference,omitempty"`
	VarReference              types.FsSlice     `json:"varReference,omitempty"`
	Images                    types.FsSlice     `json:"images,omitempty"`
	Replicas                  types.FsSlice     `json:"replicas,omitempty"`
}

type v3NameReference struct {
	resid.Gvk  `json:",inline,omitempty"`
	FieldSpecs types.FsSlice `json:"fieldSpecs,omitempty"`
}

// IsKustomizationFile reports whether path names a kustomization by its file name.
func IsKustomizationFile(path string) bool {
	base := filepath.Base(path)
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if base == name {
			return true
		}
	}
	return false
}

// Read returns what kustomize gets for the file at path whose bytes are data.
func (r *Reader) Read(path string, data []byte) []byte {
	clean, err := filepath.Abs(path)
	if err != nil {
		return data
	}
	switch {
	case IsKustomizationFile(clean):
		out, configurations := r.kustomization(clean, data)
		for _, configuration := range configurations {
			if !filepath.IsAbs(configuration) {
				configuration = filepath.Join(filepath.Dir(clean), configuration)
			}
			r.configurations[filepath.Clean(configuration)] = true
		}
		return out
	case r.configurations[clean]:
		var config v3TransformerConfig
		out, dropped := r.decode(clean, data, &config)
		if r.withoutListNamespaceSpecs(clean, &config) {
			if encoded, err := json.Marshal(config); err == nil {
				return encoded
			}
		}
		if dropped {
			return out
		}
	}
	return data
}

// kustomization returns the kustomization at path as v5 takes it (without the fields only v3.2 knew, each noted)
// and the transformer configurations it names.
func (r *Reader) kustomization(path string, data []byte) ([]byte, []string) {
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return data, nil // kustomize reports it
	}
	var written map[string]any
	if json.Unmarshal(asJSON, &written) != nil {
		return data, nil
	}
	var configurations []string
	if names, ok := lookupFold(written, "configurations"); ok {
		for _, name := range asList(names) {
			if text, ok := name.(string); ok {
				configurations = append(configurations, text)
			}
		}
	}
	var dropped []string
	for _, only := range v3OnlyKustomizationFields() {
		for key := range written {
			if strings.EqualFold(key, only) {
				delete(written, key)
				dropped = append(dropped, key)
			}
		}
	}
	if len(dropped) == 0 {
		return data, configurations
	}
	sort.Strings(dropped)
	r.note(path, dropped, "the kustomization: kustomize v3.2 knew this field (kfctl never used it), v5 removed it")
	encoded, err := json.Marshal(written)
	if err != nil {
		return data, configurations
	}
	return encoded, configurations
}

// v3OnlyKustomizationFields are the JSON names of v3Kustomization's own fields (beyond v5's type).
func v3OnlyKustomizationFields() []string {
	var names []string
	kind := reflect.TypeOf(v3Kustomization{})
	for index := 0; index < kind.NumField(); index++ {
		field := kind.Field(index)
		if !field.Anonymous {
			names = append(names, strings.Split(field.Tag.Get("json"), ",")[0])
		}
	}
	return names
}

func asList(value any) []any {
	list, _ := value.([]any)
	return list
}

// decode reads data into target as v3.2 did (unknown fields ignored); it returns the re-encoded file and true
// when that dropped fields.
func (r *Reader) decode(path string, data []byte, target any) ([]byte, bool) {
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, false // kustomize reports it
	}
	var written any
	if json.Unmarshal(asJSON, &written) != nil || json.Unmarshal(asJSON, target) != nil {
		return nil, false
	}
	encoded, err := json.Marshal(target)
	if err != nil {
		return nil, false
	}
	var kept any
	if json.Unmarshal(encoded, &kept) != nil {
		return nil, false
	}
	var dropped []string
	droppedFields(written, kept, "", &dropped)
	if len(dropped) == 0 {
		return nil, false
	}
	r.note(path, dropped, "the transformer configuration: kustomize v3.2 ignored this field, v5 refuses it")
	return encoded, true
}

// Notes names each field dropped so far, once, in the order met.
func (r *Reader) Notes() []string { return append([]string(nil), r.notes...) }

// note records each dropped field of the file at path once.
func (r *Reader) note(path string, fields []string, why string) {
	for _, field := range fields {
		note := fmt.Sprintf("%s: %s dropped from %s", path, field, why)
		if !r.noted[note] {
			r.noted[note] = true
			r.notes = append(r.notes, note)
		}
	}
}

// droppedFields appends to out the paths of the non-empty values in written that kept has no key for (keys
// compared as encoding/json matches them, ignoring case).
func droppedFields(written, kept any, at string, out *[]string) {
	switch value := written.(type) {
	case map[string]any:
		keptMap, _ := kept.(map[string]any)
		keys := make([]string, 0, len(value))
		for key := range value {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			path := key
			if at != "" {
				path = at + "." + key
			}
			match, found := lookupFold(keptMap, key)
			if !found {
				if !empty(value[key]) {
					*out = append(*out, path)
				}
				continue
			}
			droppedFields(value[key], match, path, out)
		}
	case []any:
		keptList, _ := kept.([]any)
		if len(keptList) != len(value) {
			return
		}
		for index := range value {
			droppedFields(value[index], keptList[index], fmt.Sprintf("%s[%d]", at, index), out)
		}
	}
}

func lookupFold(values map[string]any, key string) (any, bool) {
	if value, found := values[key]; found {
		return value, true
	}
	for candidate, value := range values {
		if strings.EqualFold(candidate, key) {
			return value, true
		}
	}
	return nil, false
}

func empty(value any) bool {
	switch v := value.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case bool:
		return !v
	case float64:
		return v == 0
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}
