package obs

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestProfileEndpoints: off without the environment variable; with it, a
// loopback caller starts and stops a CPU profile and gets a valid pprof
// profile, and a caller from elsewhere is refused.
func TestProfileEndpoints(t *testing.T) {
	off := http.NewServeMux()
	t.Setenv(ProfileEnv, "")
	AddProfile(off)
	rec := httptest.NewRecorder()
	off.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/debug/profile/start", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("without %s: start answered %d, want 404", ProfileEnv, rec.Code)
	}

	t.Setenv(ProfileEnv, "1")
	mux := http.NewServeMux()
	AddProfile(mux)
	far := httptest.NewRequest(http.MethodPost, "/debug/profile/start", nil)
	far.RemoteAddr = "192.0.2.7:4000"
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, far)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("a caller from 192.0.2.7: start answered %d, want 403", rec.Code)
	}

	srv := httptest.NewServer(mux) // on 127.0.0.1
	defer srv.Close()
	post := func(path string) (int, []byte) {
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := post("/debug/profile/stop"); code != http.StatusConflict {
		t.Fatalf("stop with none running: %d %s, want 409", code, b)
	}
	if code, b := post("/debug/profile/start"); code != http.StatusNoContent {
		t.Fatalf("start: %d %s", code, b)
	}
	if code, _ := post("/debug/profile/start"); code != http.StatusConflict {
		t.Fatalf("a second start: %d, want 409", code)
	}
	code, b := post("/debug/profile/stop")
	if code != http.StatusOK {
		t.Fatalf("stop: %d %s", code, b)
	}
	if !isPprof(b) {
		t.Fatalf("stop's answer is not a pprof profile (gzipped protobuf): % x", b[:min(len(b), 8)])
	}
	resp, err := http.Get(srv.URL + "/debug/profile/block")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !isPprof(b) {
		t.Fatalf("block profile: %d, % x", resp.StatusCode, b[:min(len(b), 8)])
	}
}

// isPprof: pprof's format is a gzipped protocol buffer.
func isPprof(b []byte) bool { return len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b }
