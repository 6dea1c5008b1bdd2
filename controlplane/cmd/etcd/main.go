// Command etcd is the store kube-apiserver keeps its objects in: etcd's server at the
// release go.mod pins, with the same main as upstream's go.etcd.io/etcd/v3 main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
