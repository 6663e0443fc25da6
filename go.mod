module github.com/corral-cluster/corral

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/spf13/cobra v1.10.2
	github.com/vishvananda/netlink v1.3.1
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.45.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)
