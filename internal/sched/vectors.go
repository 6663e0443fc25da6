package sched

// Vector is one case of testdata/vectors.json: a pool, a scheduler and the
// picks it must make for a run of new flows (the pool's counts hold for
// every pick). The XDP dataplane's tests run the same file.
type Vector struct {
	Name      string   `json:"name"`
	Scheduler string   `json:"scheduler"`
	Servers   []Server `json:"servers"`
	Sources   []string `json:"sources"`
	Want      []int    `json:"want"`
}
