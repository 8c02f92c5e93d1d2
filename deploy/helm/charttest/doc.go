// Package charttest tests the cooldownd Helm chart in deploy/helm/cooldownd
// without a cluster: it lints the chart and renders it with Helm's Go
// packages, strictly decodes every manifest into its Kubernetes API type
// and checks the properties operators rely on.
//
// It is a separate module so that Helm's dependency tree stays out of the
// server's go.mod. Run it with
//
//	go -C deploy/helm/charttest test ./...
//
// and refresh testdata/default.golden.yaml with -update.
package charttest
