// jobset-validate admits JobSet manifests as a cluster running this JobSet release would,
// without a cluster: what the API server does to a custom resource on create (prune unknown
// fields, which strict field validation refuses; apply the CRD's defaults; check ObjectMeta,
// the schema, list types and x-kubernetes-validations rules), with the JobSet webhooks'
// defaulting and create validation in between. The webhooks are the jobset module's own,
// registered on a controller-runtime manager's webhook server as the JobSet controller
// registers them (register_*.go: the call differs between releases) and called with the
// AdmissionReview the API server would send; the manager is never started and no API server
// is reached.
//
// Usage: jobset-validate [-crd FILE] MANIFEST...   (each a YAML file of one or more JobSets)
//
// Prints one line per refused manifest and exits 1 if any is refused; prints nothing and
// exits 0 when all are admitted. -crd defaults to the CRD shipped in the jobset module this
// program was built with (in the Go module cache).
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
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"
)

const (
	jobsetModule = "sigs.k8s.io/jobset"
	crdInModule  = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
	// The namespace the API server takes from the request when the manifest names none.
	requestNamespace = "default"
	// Where controller-runtime serves a type's webhooks: /mutate-<group>-<version>-<kind>.
	mutatePath   = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
	validatePath = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
)

// admission holds what the API server derives from the CRD once, and the webhooks.
type admission struct {
	structural *structuralschema.Structural
	schema     apiextensionsvalidation.SchemaValidator
	cel        *cel.Validator
	webhooks   *http.ServeMux
}

func main() {
	crdPath := flag.String("crd", "", "the JobSet CRD (default: the one in the jobset module this program was built with)")
	flag.Parse()
	if flag.NArg() == 0 {
		fail("usage: jobset-validate [-crd FILE] MANIFEST...")
	}
	path := *crdPath
	if path == "" {
		var err error
		if path, err = moduleCRD(); err != nil {
			fail("jobset-validate: " + err.Error())
		}
	}
	adm, err := load(path)
	if err != nil {
		fail(fmt.Sprintf("jobset-validate: CRD %s: %v", path, err))
	}
	refused := 0
	for _, file := range flag.Args() {
		docs, err := readDocuments(file)
		if err != nil {
			fmt.Printf("%s: %v\n", file, err)
			refused++
			continue
		}
		for i, doc := range docs {
			if err := adm.create(doc); err != nil {
				where := file
				if len(docs) > 1 {
					where = fmt.Sprintf("%s[%d]", file, i)
				}
				fmt.Printf("%s: %s\n", where, strings.ReplaceAll(err.Error(), "\n", "; "))
				refused++
			}
		}
	}
	if refused > 0 {
		os.Exit(1)
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}

// moduleCRD is the CRD file of the jobset module version linked into this binary.
func moduleCRD() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("no build info: pass -crd")
	}
	version := ""
	for _, dep := range info.Deps {
		if dep.Path == jobsetModule {
			version = dep.Version
		}
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			return "", fmt.Errorf("cannot find the Go module cache (go env GOMODCACHE: %v): pass -crd", err)
		}
		cache = strings.TrimSpace(string(out))
	}
	path := filepath.Join(cache, jobsetModule+"@"+version, crdInModule)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s@%s's CRD is not in the module cache (%v): pass -crd", jobsetModule, version, err)
	}
	return path, nil
}

func load(path string) (*admission, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != jobset.GroupVersion.Version || v.Schema == nil {
			continue
		}
		var props apiextensionsinternal.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &props, nil); err != nil {
			return nil, err
		}
		structural, err := structuralschema.NewStructural(&props)
		if err != nil {
			return nil, err
		}
		validator, _, err := apiextensionsvalidation.NewSchemaValidator(&props)
		if err != nil {
			return nil, err
		}
		hooks, err := webhookMux()
		if err != nil {
			return nil, fmt.Errorf("registering the JobSet webhooks: %v", err)
		}
		return &admission{structural, validator, cel.NewValidator(structural, true, celconfig.PerCallLimit), hooks}, nil
	}
	return nil, fmt.Errorf("no %s schema", jobset.GroupVersion)
}

func readDocuments(file string) ([]map[string]interface{}, error) {
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var docs []map[string]interface{}
	for {
		raw, err := reader.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		obj := map[string]interface{}{}
		if err := yaml.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
		if len(obj) > 0 {
			docs = append(docs, obj)
		}
	}
}

// create runs one manifest through what `kubectl create` meets: the API server's custom
// resource handling and the JobSet webhooks, in the API server's order.
func (a *admission) create(obj map[string]interface{}) error {
	u := &unstructured.Unstructured{Object: obj}
	if u.GetAPIVersion() != jobset.GroupVersion.String() || u.GetKind() != "JobSet" {
		return fmt.Errorf("not a %s JobSet (apiVersion %q, kind %q)", jobset.GroupVersion, u.GetAPIVersion(), u.GetKind())
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(requestNamespace)
	}
	// Strict field validation: a field the schema does not know is an error, not dropped.
	unknown := pruning.PruneWithOptions(u.Object, a.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		return fmt.Errorf("strict decoding error: unknown field(s) %s", strings.Join(quoted(unknown), ", "))
	}
	if err := schemaobjectmeta.Coerce(nil, u.Object, a.structural, true, false); err != nil {
		return err
	}
	defaulting.Default(u.Object, a.structural)

	// The mutating webhook (mjobset.kb.io) sees the defaulted object; its patch is applied.
	ctx := context.Background()
	mutated, err := a.admit(mutatePath, u)
	if err != nil {
		return fmt.Errorf("admission webhook \"mjobset.kb.io\" %v", err)
	}
	u.Object = mutated

	var errs field.ErrorList
	errs = append(errs, apimachineryvalidation.ValidateObjectMetaAccessor(u, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, apiextensionsvalidation.ValidateCustomResource(nil, u.Object, a.schema)...)
	errs = append(errs, schemaobjectmeta.Validate(nil, u.Object, a.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, a.structural, u.Object)...)
	if len(errs) == 0 {
		celErrs, _ := a.cel.Validate(ctx, nil, a.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("JobSet.jobset.x-k8s.io %q is invalid: %v", u.GetName(), errs.ToAggregate())
	}
	if _, err := a.admit(validatePath, u); err != nil {
		return fmt.Errorf("admission webhook \"vjobset.kb.io\" %v", err)
	}
	return nil
}

// webhookMux registers the JobSet webhooks on a manager that is never started.
func webhookMux() (*http.ServeMux, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := jobset.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// The webhooks' client is only asked for existing PVCs (volumeClaimPolicies): with no API
	// server it finds none, which is what a create in an empty namespace sees.
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{}),
	})
	if err != nil {
		return nil, err
	}
	if err := registerJobSetWebhooks(mgr); err != nil {
		return nil, err
	}
	return mgr.GetWebhookServer().WebhookMux(), nil
}

// admit sends the object to one webhook as the API server would (AdmissionReview v1, CREATE)
// and returns the object with the webhook's patch applied, or the webhook's refusal.
func (a *admission) admit(path string, u *unstructured.Unstructured) (map[string]interface{}, error) {
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "jobset-validate",
			Kind:      metav1.GroupVersionKind{Group: jobset.GroupVersion.Group, Version: jobset.GroupVersion.Version, Kind: "JobSet"},
			Resource:  metav1.GroupVersionResource{Group: jobset.GroupVersion.Group, Version: jobset.GroupVersion.Version, Resource: "jobsets"},
			Name:      u.GetName(),
			Namespace: u.GetNamespace(),
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.webhooks.ServeHTTP(rec, req)
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || answer.Response == nil {
		return nil, fmt.Errorf("failed: HTTP %d from %s: %s", rec.Code, path, strings.TrimSpace(rec.Body.String()))
	}
	resp := answer.Response
	if !resp.Allowed {
		msg := "denied"
		if resp.Result != nil {
			msg = resp.Result.Message
		}
		return nil, fmt.Errorf("denied the request: %s", msg)
	}
	if len(resp.Patch) == 0 {
		return u.Object, nil
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		return nil, err
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	return out, json.Unmarshal(patched, &out)
}

func quoted(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = fmt.Sprintf("%q", p)
	}
	return out
}
