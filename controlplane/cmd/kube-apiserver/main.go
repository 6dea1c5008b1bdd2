// Command kube-apiserver is Kubernetes' API server at the release go.mod pins,
// built from k8s.io/kubernetes/cmd/kube-apiserver/app with the same main as upstream's
// cmd/kube-apiserver/apiserver.go.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream's main imports it

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the kubernetes_build_info metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
