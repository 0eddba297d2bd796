// sensor-validate checks Argo Events Sensor documents as this Argo Events release reads them,
// without a cluster or a sensor controller: the Sensor CRD has no schema (the API server
// stores any spec), so the checks that matter are the controller's: decoding into its Go
// types, unknown fields refused, then its own ValidateSensor (dependencies, filters,
// triggers), called through the argo-events module's code.
//
// Usage: sensor-validate [-eventbus nats|jetstream] FILE...   (YAML, one or more documents;
// documents of other kinds are skipped)
//
// Prints one line per refused Sensor and exits 1 if any is refused; prints nothing and exits
// 0 when all are accepted.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/argoproj/argo-events/pkg/apis/events/v1alpha1"
	"github.com/argoproj/argo-events/pkg/reconciler/sensor"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func eventBus(kind string) (*v1alpha1.EventBus, error) {
	bus := &v1alpha1.EventBus{}
	switch kind {
	case "nats":
		bus.Spec.NATS = &v1alpha1.NATSBus{Native: &v1alpha1.NativeStrategy{}}
	case "jetstream":
		bus.Spec.JetStream = &v1alpha1.JetStreamBus{}
	default:
		return nil, fmt.Errorf("-eventbus: nats or jetstream, not %q", kind)
	}
	return bus, nil
}

// check returns the reasons the Sensors of one file are refused, one per Sensor.
func check(path string, bus *v1alpha1.EventBus) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var refused []string
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return refused, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if head.Kind != "Sensor" {
			continue
		}
		var s v1alpha1.Sensor
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			refused = append(refused, fmt.Sprintf("%s: Sensor (document %d): %v", path, i, err))
			continue
		}
		if err := sensor.ValidateSensor(&s, bus); err != nil {
			refused = append(refused, fmt.Sprintf("%s: Sensor %s: %v", path, s.Name, err))
		}
	}
}

func main() {
	kind := flag.String("eventbus", "jetstream", "the EventBus the Sensors use: nats or jetstream")
	flag.Parse()
	bus, err := eventBus(*kind)
	if err != nil || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: sensor-validate [-eventbus nats|jetstream] FILE...")
		os.Exit(2)
	}
	bad := false
	for _, path := range flag.Args() {
		refused, err := check(path, bus)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sensor-validate:", err)
			os.Exit(2)
		}
		for _, line := range refused {
			fmt.Println(line)
			bad = true
		}
	}
	if bad {
		os.Exit(1)
	}
}
