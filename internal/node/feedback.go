package node

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"

	"github.com/corral-cluster/corral/internal/feedback"
)

// loadReport is what the admin /load answers: the node's own figures
// (Load, as before) and, in the same object, the feedback sample the
// director's agent source reads (feedback.FetchSample ignores the rest).
type loadReport struct {
	Load
	feedback.Sample
	SampleError string `json:"sample_error,omitempty"`
}

// serveLoad answers GET /load.
func (s *Server) serveLoad(w http.ResponseWriter, r *http.Request) {
	rep := loadReport{Load: s.load()}
	smp, err := feedback.LocalSample(feedback.LocalConfig{Node: s.name, Interface: s.loadInterface()})
	if err != nil {
		// The old fields stay useful; the director's FetchSample then
		// sees no sysUpTime and the controller decays the weight.
		rep.SampleError = err.Error()
	} else {
		rep.Sample = smp
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// loadInterface is the interface whose octets enter equation 3: the
// configured one, else the one holding the service address, else the
// first up, non-loopback one, else lo.
func (s *Server) loadInterface() string {
	if s.cfg.LoadInterface != "" {
		return s.cfg.LoadInterface
	}
	var want netip.Addr
	if ap, err := netip.ParseAddrPort(s.name); err == nil {
		want = ap.Addr().Unmap()
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "lo"
	}
	first := ""
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && want.IsValid() && !want.IsUnspecified() && p.Addr().Unmap() == want {
				return ifc.Name
			}
		}
		if first == "" && ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagLoopback == 0 {
			first = ifc.Name
		}
	}
	if first == "" {
		return "lo"
	}
	return first
}
