// Command control-plane is a multi-call binary holding the Kubernetes control plane that
// cdtarget's cluster tests run against: `control-plane apiserver ...` is kube-apiserver,
// `control-plane controller-manager ...` is kube-controller-manager and `control-plane etcd ...`
// is etcd, all at the versions pinned in go.mod. One binary shares one dependency build.
//
// Build: go build -o <cache>/control-plane .  (tests/common/control_plane.rs does this.)
package main

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

const usage = "usage: control-plane apiserver|controller-manager|etcd [flags]"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	sub, rest := os.Args[1], os.Args[2:]
	switch sub {
	case "apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	case "controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(rest)
		os.Exit(cli.Run(cmd))
	case "etcd":
		// etcdmain parses os.Args itself: present it the arguments as the etcd binary sees them.
		etcdmain.Main(append([]string{"etcd"}, rest...))
	default:
		fmt.Fprintf(os.Stderr, "unknown subcommand %q\n%s\n", sub, usage)
		os.Exit(2)
	}
}
