package mgmt

import "net/http"

// routesRollout registers RouteRollout and RouteBinary.
func (s *Station) routesRollout(mux *http.ServeMux) {}
