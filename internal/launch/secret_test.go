package launch_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-cluster/corral/internal/lab"
	"github.com/corral-cluster/corral/internal/launch"
	"github.com/corral-cluster/corral/internal/pfs/client"
	"github.com/corral-cluster/corral/internal/pfs/pfstest"
	"github.com/corral-cluster/corral/internal/pfs/proto"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func servers(t *testing.T, ctx context.Context, cl *client.Client) []proto.ServerInfo {
	t.Helper()
	r, err := cl.Call(ctx, &proto.Servers{})
	if err != nil {
		t.Fatal(err)
	}
	ss := r.(*proto.ServersReply).Servers
	for i := range ss {
		ss[i].Capacity, ss[i].Free, ss[i].Seen = 0, 0, 0 // change with every heartbeat
	}
	return ss
}

func put(t *testing.T, ctx context.Context, cl *client.Client, path string, data []byte) error {
	f, err := cl.CreatePath(ctx, path, 0o644, client.CreateOpts{})
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestStrangersChangeNothing: real meta and iods refuse a process without
// the cluster secret (none, or another cluster's) before any request, so it
// can neither write, unlink nor take over a server ID; the read-only
// credential reads but never writes.
func TestStrangersChangeNothing(t *testing.T) {
	fsys := pfstest.Start(t, 2)
	ctx := ctxT(t)
	full := client.New(fsys.Meta.Addr, client.WithSecurity(proto.Security{Cred: fsys.Cred}))
	defer full.Close()
	data := []byte("members only")
	if err := put(t, ctx, full, "/f", data); err != nil {
		t.Fatal(err)
	}
	attr, err := full.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	before := servers(t, ctx, full)
	takeover := &proto.Register{ID: before[0].ID, Addr: "127.0.0.1:1", Capacity: 1, Free: 1}

	other, _ := proto.NewSecret()
	for name, cred := range map[string]*proto.Credential{"no secret": nil, "wrong secret": other} {
		p := proto.Pool{Security: proto.Security{Cred: cred}}
		for _, target := range []struct {
			addr string
			req  proto.Msg
		}{
			{fsys.Meta.Addr, takeover},
			{fsys.Meta.Addr, &proto.Unlink{Parent: 1, Name: "f"}},
			{fsys.IODs[0].Addr, &proto.Write{Handle: attr.Ino, Off: 0, Data: []byte("XXXX")}},
			{fsys.IODs[0].Addr, &proto.Remove{Handle: attr.Ino}},
		} {
			_, err := p.Call(ctx, target.addr, target.req)
			if !errors.Is(err, proto.ErrAuth) || !strings.Contains(err.Error(), target.addr) {
				t.Errorf("%s: %T to %s: %v", name, target.req, target.addr, err)
			}
			if name == "wrong secret" && !strings.Contains(err.Error(), "refused us: wrong cluster secret") {
				t.Errorf("wrong secret: %v", err)
			}
			if name == "no secret" && !strings.Contains(err.Error(), "--secret-file") {
				t.Errorf("no secret: %v", err)
			}
		}
		p.Close()
	}
	for _, p := range []*launch.Proc{fsys.Meta, fsys.IODs[0]} {
		if log, _ := os.ReadFile(p.Log); !strings.Contains(string(log), "wrong cluster secret") || !strings.Contains(string(log), "remote=127.0.0.1:") {
			t.Errorf("%s does not log the refused peer:\n%s", p.Name, log)
		}
	}

	ro := client.New(fsys.Meta.Addr, client.WithSecurity(proto.Security{Cred: fsys.Cred.ReadOnly()}))
	defer ro.Close()
	f, err := ro.Open(ctx, "/f")
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	got := make([]byte, len(data))
	if n, err := f.ReadAt(got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("read-only read: %d %v", n, err)
	}
	f.Close()
	if _, err := ro.Call(ctx, takeover); !errors.Is(err, syscall.EROFS) {
		t.Errorf("read-only register: %v", err)
	}
	if err := put(t, ctx, ro, "/g", data); !errors.Is(err, syscall.EROFS) {
		t.Errorf("read-only create: %v", err)
	}
	if err := ro.Remove(ctx, "/f"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("read-only unlink: %v", err)
	}
	rop := proto.Pool{Security: proto.Security{Cred: fsys.Cred.ReadOnly()}}
	defer rop.Close()
	if _, err := rop.Call(ctx, fsys.IODs[0].Addr, &proto.Write{Handle: attr.Ino, Data: []byte("XXXX")}); !errors.Is(err, syscall.EROFS) {
		t.Errorf("read-only write to an iod: %v", err)
	}

	// Nothing changed.
	if after := servers(t, ctx, full); !reflect.DeepEqual(after, before) {
		t.Errorf("servers changed: %+v -> %+v", before, after)
	}
	f, err = full.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, _ := f.ReadAt(got, 0); n != len(data) || !bytes.Equal(got, data) {
		t.Errorf("file changed: %q", got[:n])
	}
	if _, err := full.Stat(ctx, "/g"); err == nil {
		t.Error("read-only client created /g")
	}
}

// TestFakeMeta: an iod whose meta does not know the cluster secret refuses
// to register with it, and a client refuses it too.
func TestFakeMeta(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	ctx := ctxT(t)
	other, _ := proto.NewSecret()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &proto.Server{Handler: nil, Security: proto.Security{Cred: other}}
	go fake.Serve(l)
	t.Cleanup(fake.Close)
	_, err = launch.Start(ctx, "iod", pfstest.Binary(t), filepath.Join(t.TempDir(), "iod.log"),
		"iod", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--meta", l.Addr().String(), "--secret-file", fsys.SecretFile)
	if err == nil || !strings.Contains(err.Error(), "wrong cluster secret") {
		t.Errorf("iod with a fake meta: %v", err)
	}
	cl := client.New(l.Addr().String(), client.WithSecurity(proto.Security{Cred: fsys.Cred}))
	defer cl.Close()
	if _, err := cl.Stat(ctx, "/"); !errors.Is(err, proto.ErrAuth) {
		t.Errorf("client to a fake meta: %v", err)
	}
}

// corral runs the binary with env (CORRAL_SECRET_FILE removed first).
func corral(t *testing.T, env []string, args ...string) (string, error) {
	cmd := exec.Command(pfstest.Binary(t), args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, proto.SecretEnv+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestCLISecret(t *testing.T) {
	fsys := pfstest.Start(t, 1)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.WriteFile(src, []byte("hello"), 0o644)
	meta := "--meta=" + fsys.Meta.Addr
	if out, err := corral(t, nil, "fs", meta, "ls", "/"); err == nil || !strings.Contains(out, "no cluster secret") {
		t.Errorf("fs without a secret: %v %s", err, out)
	}
	if out, err := corral(t, nil, "fs", meta, "--secret-file", fsys.SecretFile, "put", src, "/a"); err != nil {
		t.Fatalf("put: %v %s", err, out)
	}
	out, err := corral(t, []string{proto.SecretEnv + "=" + fsys.SecretFile}, "fs", "secret", "--read-only")
	if err != nil {
		t.Fatal(err, out)
	}
	roFile := filepath.Join(dir, "ro")
	os.WriteFile(roFile, []byte(out), 0o600)
	if c, err := proto.LoadCredential(roFile); err != nil || c.Kind() != proto.KindReadOnly || !bytes.Equal(c.Marshal(), fsys.Cred.ReadOnly().Marshal()) {
		t.Fatalf("corral fs secret --read-only printed %q: %v", out, err)
	}
	// --out writes it mode 0600; a copy others can read is refused with
	// the chmod that fixes it.
	outFile := filepath.Join(dir, "ro.out")
	if out, err := corral(t, []string{proto.SecretEnv + "=" + fsys.SecretFile}, "fs", "secret", "--read-only", "--out", outFile); err != nil {
		t.Fatal(err, out)
	}
	if fi, err := os.Stat(outFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("--out file: %v %v, want mode 0600", fi.Mode(), err)
	}
	os.Chmod(outFile, 0o644)
	if out, err := corral(t, nil, "fs", meta, "--secret-file", outFile, "cat", "/a"); err == nil || !strings.Contains(out, "chmod 600 "+outFile) {
		t.Errorf("read-only credential of mode 0644: %v %q, want a refusal naming chmod 600", err, out)
	}
	if out, err := corral(t, nil, "fs", meta, "--secret-file", roFile, "cat", "/a"); err != nil || out != "hello" {
		t.Errorf("read-only cat: %v %q", err, out)
	}
	if out, err := corral(t, nil, "fs", meta, "--secret-file", roFile, "put", src, "/b"); err == nil || !strings.Contains(out, "read-only credential") {
		t.Errorf("read-only put: %v %s", err, out)
	}
	if out, err := corral(t, nil, "fs", meta, "--secret-file", roFile, "rm", "/a"); err == nil || !strings.Contains(out, "read-only") {
		t.Errorf("read-only rm: %v %s", err, out)
	}
	if out, err := corral(t, nil, "iod", "--meta", fsys.Meta.Addr, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--secret-file", roFile); err == nil || !strings.Contains(out, "not the read-only credential") {
		t.Errorf("iod with the read-only credential: %v %s", err, out)
	}
}

// TestTLSCluster runs meta and an iod with TLS on every connection (the
// HMAC handshake inside it) and a client over TLS; a plain client fails.
func TestTLSCluster(t *testing.T) {
	ctx := ctxT(t)
	cert, key, ca := testCerts(t)
	bin, dir := pfstest.Binary(t), t.TempDir()
	tlsArgs := []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca}
	meta, err := launch.Start(ctx, "meta", bin, filepath.Join(dir, "meta.log"),
		append([]string{"meta", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "meta")}, tlsArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Stop() })
	secret := filepath.Join(dir, "meta", proto.SecretFileName)
	iod, err := launch.Start(ctx, "iod", bin, filepath.Join(dir, "iod.log"),
		append([]string{"iod", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "iod"), "--meta", meta.Addr, "--secret-file", secret}, tlsArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iod.Stop() })
	cred, err := proto.LoadCredential(secret)
	if err != nil {
		t.Fatal(err)
	}
	_, cliTLS, err := proto.LoadTLS("", "", ca)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(meta.Addr, client.WithSecurity(proto.Security{Cred: cred, TLSClient: cliTLS}))
	defer cl.Close()
	if err := put(t, ctx, cl, "/tls", []byte("over TLS")); err != nil {
		t.Fatalf("write over TLS: %v", err)
	}
	// Without --tls-ca a client still speaks TLS (the default), trusting
	// the secret handshake bound to the session; only a plain-text one
	// (--insecure) is refused.
	def := client.New(meta.Addr, client.WithSecurity(proto.Security{Cred: cred}))
	defer def.Close()
	if _, err := def.Stat(ctx, "/tls"); err != nil {
		t.Errorf("a default (TLS, no CA) client: %v", err)
	}
	plain := client.New(meta.Addr, client.WithSecurity(proto.Security{Cred: cred, Insecure: true}))
	defer plain.Close()
	if _, err := plain.Stat(ctx, "/tls"); err == nil {
		t.Errorf("a plain-text client to a TLS meta was served")
	} else {
		t.Logf("a plain-text client: %v", err)
	}
}

func testCerts(t *testing.T) (certFile, keyFile, caFile string) {
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "corral test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile, caFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	write := func(p, typ string, der []byte) {
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, "CERTIFICATE", der)
	write(keyFile, "EC PRIVATE KEY", keyDER)
	write(caFile, "CERTIFICATE", caDER)
	return
}

// TestReadOnlyMount: a mount given the read-only credential reads and
// refuses changes with EROFS.
func TestReadOnlyMount(t *testing.T) {
	lab.Need(t, lab.FUSE)
	fsys := pfstest.Start(t, 1)
	ctx := ctxT(t)
	full := client.New(fsys.Meta.Addr, client.WithSecurity(proto.Security{Cred: fsys.Cred}))
	defer full.Close()
	if err := put(t, ctx, full, "/r", []byte("readable")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	m, err := launch.Start(ctx, "mount", pfstest.Binary(t), filepath.Join(dir, "mount.log"),
		"mount", "--meta", fsys.Meta.Addr, "--secret-file", fsys.ReadOnlyFile, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m.Stop() != nil {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	if b, err := os.ReadFile(filepath.Join(mnt, "r")); err != nil || string(b) != "readable" {
		t.Fatalf("read through a read-only mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "w"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create through a read-only mount: %v", err)
	}
	if err := os.Remove(filepath.Join(mnt, "r")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("unlink through a read-only mount: %v", err)
	}
}
