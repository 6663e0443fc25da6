package director

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		raw   string
		retry bool
		file  string
	}{
		{"GET /a/b.html HTTP/1.1\r\nHost: Example.org\r\n\r\n", true, "/www/example.org/a/b.html"},
		{"HEAD / HTTP/1.1\r\nHost: example.org:8080\r\n\r\n", true, "/www/example.org/index.html"},
		{"GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", false, "/www/a/x"},
		{"POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", false, ""},
		{"GET /x HTTP/1.1\r\nHost: bad host\r\n\r\n", true, ""},
	}
	for _, c := range cases {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(c.raw)))
		if err != nil {
			t.Fatal(err)
		}
		if retry, file := classify(req, "/www"); retry != c.retry || file != c.file {
			t.Errorf("%q: retry %v file %q, want %v %q", c.raw, retry, file, c.retry, c.file)
		}
	}
}

func FuzzClassify(f *testing.F) {
	f.Add([]byte("GET /a/../../b HTTP/1.1\r\nHost: x.org\r\n\r\n"))
	f.Add([]byte("PUT / HTTP/1.0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(raw))))
		if err != nil {
			return
		}
		retry, file := classify(req, "/www")
		if file != "" && !strings.HasPrefix(file, "/www/") {
			t.Fatalf("file %q outside the docroot", file)
		}
		if retry && req.Method != "GET" && req.Method != "HEAD" {
			t.Fatalf("would re-send a %s", req.Method)
		}
	})
}
