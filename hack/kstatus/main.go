// Command kstatus prints how kstatus, the status library of Flux, Helm 4's --wait and kpt, reads a
// Kubernetes resource: the same status.Compute those tools call, on the resource as the API server
// returns it.
//
//	kubectl get gsp/gluesync -o json | kstatus
//	{"status":"Current","message":"Resource is current"}
//
// It reads JSON objects from standard input (one, several in a row, or a List) and prints one line of
// JSON per resource. It exits 1 on input it cannot read.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	enc := json.NewEncoder(out)
	read := 0
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading a JSON object from standard input: %w", err)
		}
		read++
		// UnmarshalJSON keeps integers as int64, which status.Compute needs for metadata.generation and
		// status.observedGeneration (plain encoding/json would give float64 and a lookup error).
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return fmt.Errorf("object %d: %w", read, err)
		}
		objects := []*unstructured.Unstructured{u}
		if u.IsList() {
			objects = nil
			err := u.EachListItem(func(o runtime.Object) error {
				objects = append(objects, o.(*unstructured.Unstructured))
				return nil
			})
			if err != nil {
				return fmt.Errorf("object %d: %w", read, err)
			}
		}
		for _, o := range objects {
			res, err := status.Compute(o)
			if err != nil {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
			if err := enc.Encode(result{Status: res.Status.String(), Message: res.Message}); err != nil {
				return err
			}
		}
	}
	if read == 0 {
		return errors.New("no JSON object on standard input")
	}
	return nil
}
