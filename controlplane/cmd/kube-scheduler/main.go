// Command kube-scheduler is Kubernetes' scheduler at the release go.mod pins, built
// from k8s.io/kubernetes/cmd/kube-scheduler/app with the same main as upstream's
// cmd/kube-scheduler/scheduler.go. The sandbox runs it to bind the pods the controller
// manager creates for Deployments and DaemonSets (the Helm chart's); DLJob pods are
// bound by gpuflow's operator.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the kubernetes_build_info metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	os.Exit(cli.Run(command))
}
