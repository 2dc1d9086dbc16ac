package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// v3Reader hands kustomize v5 the kustomizations and transformer configurations of a tree written for kfctl's
// kustomize v3.2 in the form v5 accepts, with the meaning v3.2 gave them. v3.2 decoded both with encoding/json
// without refusing unknown fields (keys matched case-insensitively, as v5 still does); v5 refuses unknown fields.
// Here each file is decoded into kustomize's own types the v3.2 way, and when that dropped a field the file is
// handed over re-encoded, and the field is noted. A file v5 reads as it is reaches it unchanged.
type v3Reader struct {
	configurations map[string]bool // transformer configurations named by the kustomizations read so far
	notes          []string
	noted          map[string]bool
}

func newV3Reader() *v3Reader {
	return &v3Reader{configurations: map[string]bool{}, noted: map[string]bool{}}
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

func isKustomizationFile(path string) bool {
	base := filepath.Base(path)
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if base == name {
			return true
		}
	}
	return false
}

// read returns what kustomize gets for the file at path whose bytes are data.
func (r *v3Reader) read(path string, data []byte) []byte {
	clean := filepath.Clean(absolute(path))
	switch {
	case isKustomizationFile(clean):
		var kustomization types.Kustomization
		out, ok := r.decode(clean, "kustomization", data, &kustomization)
		for _, configuration := range kustomization.Configurations {
			if !filepath.IsAbs(configuration) {
				configuration = filepath.Join(filepath.Dir(clean), configuration)
			}
			r.configurations[filepath.Clean(configuration)] = true
		}
		if ok {
			return out
		}
	case r.configurations[clean]:
		var config v3TransformerConfig
		if out, ok := r.decode(clean, "transformer configuration", data, &config); ok {
			return out
		}
	}
	return data
}

// decode reads data into target as v3.2 did; it returns the re-encoded file and true when that dropped fields.
func (r *v3Reader) decode(path, what string, data []byte, target any) ([]byte, bool) {
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
	for _, field := range dropped {
		note := fmt.Sprintf("%s: %s dropped from the %s: kustomize v3.2 ignored this field, v5 refuses it",
			path, field, what)
		if !r.noted[note] {
			r.noted[note] = true
			r.notes = append(r.notes, note)
		}
	}
	return encoded, true
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
