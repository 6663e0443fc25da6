package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Client calls a station's API. Stations are tried in order; a station
// that cannot be reached is skipped (an HTTP error answer is not).
type Client struct {
	Stations []string // base URLs: https://127.0.0.1:7600
	Token    string   // bearer
	HTTP     *http.Client
}

// DialTimeout bounds connecting to a station and the TLS handshake.
const DialTimeout = 5 * time.Second

// NewClient makes a client trusting the CA in caPEM (nil: the system's).
func NewClient(stations []string, token string, caPEM []byte) (*Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("station CA: no PEM certificate in it")
		}
		tc.RootCAs = pool
	}
	// Bounded connect and handshake: a hung station (accepts, never
	// answers) must not hold a caller that could try the next one.
	tr := &http.Transport{
		TLSClientConfig:     tc,
		DialContext:         (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: DialTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{Stations: stations, Token: token, HTTP: &http.Client{Transport: tr}}, nil
}

// NewClientCAFile is NewClient with the CA read from a file ("" : none).
func NewClientCAFile(stations []string, token, caFile string) (*Client, error) {
	var ca []byte
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("station CA: %w", err)
		}
		ca = b
	}
	return NewClient(stations, token, ca)
}

// StatusError is an error answer of the station.
type StatusError struct {
	Status int
	Body   Error
}

func (e *StatusError) Error() string {
	msg := e.Body.Error
	for _, fe := range e.Body.Errors {
		msg += fmt.Sprintf("\n%d: %s: %s", fe.Line, fe.Path, fe.Msg)
	}
	return fmt.Sprintf("station: %d %s: %s", e.Status, http.StatusText(e.Status), msg)
}

// IsConflict says whether err is a 409 (stale base version).
func IsConflict(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusConflict
}

// Do sends in (JSON; nil: no body) with method to route and decodes the
// answer into out (nil: discarded).
func (c *Client) Do(ctx context.Context, method, route string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = b
	}
	return c.DoRaw(ctx, method, route, "application/json", body, out)
}

// DoRaw is Do with a raw body of a content type.
func (c *Client) DoRaw(ctx context.Context, method, route, ctype string, body []byte, out any) error {
	return c.each(ctx, route, out, func(url string) (*http.Request, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err == nil && body != nil {
			req.Header.Set("Content-Type", ctype)
		}
		return req, err
	})
}

// DoFile is DoRaw with the body streamed from the file at path (opened
// anew for each station tried), for uploads too big to hold in memory.
func (c *Client) DoFile(ctx context.Context, method, route, path string, out any) error {
	return c.each(ctx, route, out, func(url string) (*http.Request, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, method, url, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		req.ContentLength = fi.Size()
		req.Header.Set("Content-Type", "application/octet-stream")
		return req, nil // the transport closes f
	})
}

// each sends the request newReq makes to each station in turn until one
// answers (an unreachable one is skipped) and decodes the answer.
func (c *Client) each(ctx context.Context, route string, out any, newReq func(url string) (*http.Request, error)) error {
	if len(c.Stations) == 0 {
		return errors.New("no station: give --station URL")
	}
	var errs []string
	for _, st := range c.Stations {
		req, err := newReq(strings.TrimSuffix(st, "/") + route)
		if err != nil {
			return err
		}
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Sprintf("%s: %v", st, err))
			continue
		}
		return answer(st, resp, out)
	}
	return fmt.Errorf("no station answered: %s", strings.Join(errs, "; "))
}

// answer turns a station's answer into out (JSON, or copied to an
// io.Writer) or a StatusError.
func answer(st string, resp *http.Response, out any) error {
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		se := &StatusError{Status: resp.StatusCode}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &se.Body) != nil || se.Body.Error == "" {
			se.Body.Error = strings.TrimSpace(string(b))
		}
		return se
	}
	if out == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	if w, ok := out.(io.Writer); ok {
		_, err := io.Copy(w, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: bad answer: %w", st, err)
	}
	return nil
}
