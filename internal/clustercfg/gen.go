//go:build ignore

// gen writes schema.json, ../../docs/config.schema.json and
// ../../docs/config.md from types.go (run by `go generate`).
package main

import (
	"log"
	"os"

	"github.com/corral-cluster/corral/internal/clustercfg"
)

func main() {
	src, err := os.ReadFile("types.go")
	if err != nil {
		log.Fatal(err)
	}
	example, err := os.ReadFile("testdata/good/full.yaml")
	if err != nil {
		log.Fatal(err)
	}
	schema, md, err := clustercfg.GenerateDocs(src, example)
	if err != nil {
		log.Fatal(err)
	}
	for name, b := range map[string][]byte{"schema.json": schema, "../../docs/config.schema.json": schema, "../../docs/config.md": md} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
