// Command pause is the sandbox container of a Pod on scripts/k8s's nodes: it
// holds the Pod's namespaces open, reaps the zombies it inherits as PID 1, and
// exits on SIGTERM or SIGINT. No registry is reachable here, so the kubelet's
// containerd runs this instead of registry.k8s.io/pause (scripts/k8s imports it).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
