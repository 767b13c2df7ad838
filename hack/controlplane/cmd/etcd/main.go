// Command etcd is the etcd server, built from the etcd server module for the
// local test control plane (the same thin wrapper as etcd's own main.go).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
