package mgmt

import (
	"crypto/x509"
	"net"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// memberTLS issues a joining member its certificate for the file-system
// protocol: signed by the station's CA, for server use only, naming the
// host of addr and nothing else. Not for client use: the station's etcd
// takes client certificates of this CA, and a member has no business
// there (the file-system protocol authenticates clients by the secret
// handshake). Not for loopback: it must not pass for the station on
// 127.0.0.1. nil, logged, when the
// station has no CA (--insecure) or signing fails: the member then serves
// with a throwaway certificate, which the secret handshake makes as safe.
func (s *Station) memberTLS(name, addr string) *api.MemberTLS {
	if s.ca == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = ""
	}
	cert, key, err := s.ca.issueNames("corral member "+name, host, false,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
	if err != nil {
		s.log.Error("member certificate not issued", "member", name, "err", err)
		return nil
	}
	return &api.MemberTLS{Cert: string(cert), Key: string(key), CA: string(s.ca.Cert)}
}
