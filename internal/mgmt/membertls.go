package mgmt

import (
	"crypto/x509"
	"net"

	"github.com/corral-cluster/corral/internal/mgmt/api"
)

// memberTLS issues a joining member its certificate for the file-system
// protocol: signed by the station's CA, for server and client use, naming
// the host of addr (besides loopback and localhost). nil, logged, when the
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
	cert, key, err := s.ca.issue("corral member "+name, host,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		s.log.Error("member certificate not issued", "member", name, "err", err)
		return nil
	}
	return &api.MemberTLS{Cert: string(cert), Key: string(key), CA: string(s.ca.Cert)}
}
