// gitops-health prints what kstatus (sigs.k8s.io/cli-utils, as Flux and kpt use it) and a set
// of Flux healthCheckExprs (CEL, evaluated with cel-go over the object's top-level fields, as
// Flux does) say about each object on stdin. Input: {"exprs": {"inProgress": "", "failed": "",
// "current": ""}, "objects": [...]}. Output: one JSON line per object with "kstatus" and "flux".
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type input struct {
	Exprs   map[string]string `json:"exprs"`
	Objects []json.RawMessage `json:"objects"`
}

func flux(exprs map[string]string, obj map[string]interface{}) (string, error) {
	env, err := cel.NewEnv(
		cel.Variable("apiVersion", cel.DynType), cel.Variable("kind", cel.DynType),
		cel.Variable("metadata", cel.DynType), cel.Variable("spec", cel.DynType), cel.Variable("status", cel.DynType))
	if err != nil {
		return "", err
	}
	vars := map[string]interface{}{}
	for _, k := range []string{"apiVersion", "kind", "metadata", "spec", "status"} {
		if v, ok := obj[k]; ok {
			vars[k] = v
		} else {
			vars[k] = map[string]interface{}{}
		}
	}
	// Flux's order: inProgress, then failed, then current; none true means InProgress.
	for _, step := range []struct{ key, verdict string }{{"inProgress", "InProgress"}, {"failed", "Failed"}, {"current", "Current"}} {
		expr := exprs[step.key]
		if expr == "" {
			continue
		}
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return "", iss.Err()
		}
		prg, err := env.Program(ast)
		if err != nil {
			return "", err
		}
		out, _, err := prg.Eval(vars)
		if err != nil { // a field the object does not have yet (no status): not this verdict
			continue
		}
		if b, ok := out.Value().(bool); ok && b {
			return step.verdict, nil
		}
	}
	return "InProgress", nil
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, raw := range in.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil { // integers stay int64, as from the API server
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		obj := u.Object
		res, err := status.Compute(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		verdict, err := flux(in.Exprs, obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = enc.Encode(map[string]string{"kstatus": res.Status.String(), "message": res.Message, "flux": verdict})
	}
}
