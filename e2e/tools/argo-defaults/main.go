// argo-defaults prints the templates of Argo workflows as Argo's controller runs them: each
// template with the workflow's spec.templateDefaults merged in, by the strategic merge patch
// typed by Argo's own Template that the controller applies before it runs a template (in
// this Argo release: workflow/controller/operator.go, mergedTemplateDefaultsInto), defaults
// of another template type left out first, the template's own type kept.
//
// It also reads each template a caller merged itself (mfargo's base/template_defaults.py) and
// prints it through Argo's types too, so the two can be compared as Argo would hold them.
//
// Usage: argo-defaults < request.json, where the request is
//
//	{"defaults": TEMPLATE, "templates": [TEMPLATE...], "merged": [TEMPLATE...]}
//
// and the answer, on stdout, {"argo": [TEMPLATE...], "merged": [TEMPLATE...]}: "argo" the
// templates merged here, "merged" the caller's merged templates read into Argo's types.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"

	wfv1 "github.com/argoproj/argo-workflows/v4/pkg/apis/workflow/v1alpha1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

type request struct {
	Defaults  *wfv1.Template  `json:"defaults"`
	Templates []wfv1.Template `json:"templates"`
	Merged    []wfv1.Template `json:"merged"`
}

type answer struct {
	Argo   []wfv1.Template `json:"argo"`
	Merged []wfv1.Template `json:"merged"`
}

// applicable is the defaults without the template types other than the template's own.
func applicable(defaults *wfv1.Template, own wfv1.TemplateType) *wfv1.Template {
	out := defaults.DeepCopy()
	v := reflect.ValueOf(out).Elem()
	for i := 0; i < v.NumField(); i++ {
		field := v.Type().Field(i)
		if field.Type.Kind() != reflect.Ptr || field.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		if t := wfv1.TemplateType(field.Name); t.IsValid() && t != own {
			v.Field(i).Set(reflect.Zero(v.Field(i).Type()))
		}
	}
	return out
}

func merge(defaults *wfv1.Template, tmpl wfv1.Template) (wfv1.Template, error) {
	if defaults == nil {
		return tmpl, nil
	}
	own := tmpl.GetType()
	base, err := json.Marshal(applicable(defaults, own))
	if err != nil {
		return tmpl, err
	}
	patch, err := json.Marshal(tmpl)
	if err != nil {
		return tmpl, err
	}
	result, err := strategicpatch.StrategicMergePatch(base, patch, wfv1.Template{})
	if err != nil {
		return tmpl, err
	}
	var out wfv1.Template
	if err := json.Unmarshal(result, &out); err != nil {
		return tmpl, err
	}
	out.SetType(own)
	return out, nil
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "argo-defaults: reading the request:", err)
		os.Exit(2)
	}
	ans := answer{Argo: []wfv1.Template{}, Merged: req.Merged}
	if ans.Merged == nil {
		ans.Merged = []wfv1.Template{}
	}
	for _, tmpl := range req.Templates {
		merged, err := merge(req.Defaults, tmpl)
		if err != nil {
			fmt.Fprintf(os.Stderr, "argo-defaults: template %q: %v\n", tmpl.Name, err)
			os.Exit(1)
		}
		ans.Argo = append(ans.Argo, merged)
	}
	if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
		fmt.Fprintln(os.Stderr, "argo-defaults:", err)
		os.Exit(2)
	}
}
