package meta

import (
	"context"
	"testing"
)

// Healthy tells the truth: ok while the store answers, an error once it
// cannot.
func TestHealthyFollowsTheStore(t *testing.T) {
	s, err := Open(Config{Data: t.TempDir(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("open store: %v", err)
	}
	s.Close()
	if err := s.Healthy(context.Background()); err == nil {
		t.Fatal("closed store reported healthy")
	}
}
