//go:build !race

package mgmt

// floodP99Ms is the p99 TestLoginFloodKeepsAPIResponsive allows.
const floodP99Ms = 100
