//go:build race

package mgmt

// floodP99Ms is the p99 TestLoginFloodKeepsAPIResponsive allows: the race
// detector makes every request (TLS, JSON, etcd) several times slower,
// the flood's 1,500 requests included, so the product's 100 ms is
// checked by the build without it.
const floodP99Ms = 300
