package mgmt

import "net/http"

// routesUpload registers RouteFiles (webmasters' uploads).
func (s *Station) routesUpload(mux *http.ServeMux) {}
