package mgmt

import "net/http"

// routesDash registers the dashboard ("/"), RouteStatus, RouteEvents and RouteDrain.
func (s *Station) routesDash(mux *http.ServeMux) {}
