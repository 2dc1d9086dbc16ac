// Command olm-validate checks an OLM bundle directory with the operator
// framework's own validators (the library behind `operator-sdk bundle
// validate`), so the project's tests need neither operator-sdk nor a network.
//
//	olm-validate [-k8s-version 1.36] BUNDLE_DIR
//
// It runs the default bundle validators (CSV, CRD, bundle structure) plus the
// "operatorframework" suite of operator-sdk: OperatorHub v2, standard
// capabilities and categories, deprecated/removed APIs and good practices.
// Every finding is printed as "<Level>: <detail>"; the exit status is 1 when
// any finding is an error, 2 when the bundle cannot be loaded, 0 otherwise.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

func main() {
	k8sVersion := flag.String("k8s-version", "", "Kubernetes version the removed-API checks target (e.g. 1.36)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-k8s-version X.Y] BUNDLE_DIR\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}

	bundle, err := manifests.GetBundleFromDir(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: cannot load bundle %s: %v\n", flag.Arg(0), err)
		os.Exit(2)
	}

	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.AlphaDeprecatedAPIsValidator,
		validation.GoodPracticesValidator,
	)
	objects := bundle.ObjectsToValidate()
	if *k8sVersion != "" {
		// Validators read optional values from a map[string]string among the objects.
		objects = append(objects, map[string]string{"k8s-version": *k8sVersion})
	}

	failed := false
	for _, result := range validators.Validate(objects...) {
		failed = report(result.Errors) || failed
		report(result.Warnings)
	}
	if failed {
		os.Exit(1)
	}
	fmt.Printf("bundle %s (%s) is valid\n", bundle.Name, flag.Arg(0))
}

// report prints findings one per line and tells whether any was an error.
func report(findings []errors.Error) bool {
	anyError := false
	for _, finding := range findings {
		fmt.Println(finding.Error())
		anyError = anyError || finding.Level == errors.LevelError
	}
	return anyError
}
