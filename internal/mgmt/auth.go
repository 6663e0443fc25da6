package mgmt

import "net/http"

// Principal is who made a call: a user (by an API token or the bootstrap
// admin token) or a member (by its join credential).
type Principal struct {
	Name    string   // user name, or member name
	Role    string   // api.RoleAdmin, RoleWebmaster, RoleReadOnly, or a member role
	Domains []string // a webmaster's domains
	Member  bool     // a member's credential
}

// Permission levels a route needs.
const (
	permRead   = "read"   // any user (read-only and up) or member
	permAdmin  = "admin"  // admin users
	permMember = "member" // a member's credential
	permWeb    = "web"    // admin, or a webmaster (the handler checks the domain)
)

// auth wraps a handler: it authenticates the bearer token and checks
// that its principal has the permission, answering 401/403 otherwise.
func (s *Station) auth(need string, h func(w http.ResponseWriter, r *http.Request, p *Principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not built yet", http.StatusNotImplemented)
	}
}
