package servefleet

// The client's own logic, without a cluster: addresses, leader following,
// credentials and the error when nothing answers (a closed loopback port).

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNewSplitsAddresses(t *testing.T) {
	got := New(" a:1, b:2 ", "", "c:3").Addresses()
	if !slices.Equal(got, []string{"a:1", "b:2", "c:3"}) {
		t.Fatalf("addresses %v", got)
	}
	if got := New().Addresses(); !slices.Equal(got, []string{DefaultAddress}) {
		t.Fatalf("no address: %v", got)
	}
}

func TestFollowGoesToTheHintElseTheNextController(t *testing.T) {
	c := New("a:1,b:2,c:3")
	c.follow("a:1", nil)
	if got := c.Addresses()[0]; got != "b:2" {
		t.Fatalf("no hint: now at %s, want b:2", got)
	}
	c.follow("b:2", []string{"a:1"})
	if got := c.Addresses()[0]; got != "a:1" {
		t.Fatalf("hint a:1: now at %s", got)
	}
	c.follow("a:1", []string{"d:4"})
	if got := c.Addresses(); !slices.Equal(got, []string{"d:4", "a:1", "b:2", "c:3"}) {
		t.Fatalf("an unknown leader is added and called first: %v", got)
	}
	// A failure seen at a controller the client has already left moves nothing.
	c.follow("b:2", nil)
	if got := c.Addresses()[0]; got != "d:4" {
		t.Fatalf("stale failure moved the client to %s", got)
	}
}

func TestTokenProblem(t *testing.T) {
	for _, ok := range []string{"sft_abc.DEF-1~+/", "abc==", "x"} {
		if problem := tokenProblem(ok); problem != "" {
			t.Errorf("%q refused: %s", ok, problem)
		}
	}
	for token, want := range map[string]string{
		"":          "empty",
		"ab cd":     "U+0020 at character 3",
		"é":         "U+00E9 at character 1",
		"a\x00":     "U+0000 at character 2",
		"a=b":       "cannot have",
		"a,b":       "cannot have",
		"==":        "padding only",
		"tok\x7fen": "U+007F at character 4",
	} {
		if problem := tokenProblem(token); !strings.Contains(problem, want) {
			t.Errorf("%q: %q, want it to say %q", token, problem, want)
		}
	}
}

func TestABadTokenIsRefusedBeforeAnyCall(t *testing.T) {
	c := New(closedPort(t))
	defer c.Close()
	c.Token = "two words"
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot send this token") {
		t.Fatalf("err %v", err)
	}
	if len(c.conns) != 0 {
		t.Fatal("a connection was made for a token that cannot be sent")
	}
}

func TestNothingListeningEndsUnavailableAfterTimeout(t *testing.T) {
	address := closedPort(t)
	c := New(address)
	defer c.Close()
	c.Timeout = 500 * time.Millisecond
	start := time.Now()
	_, err := c.Status(context.Background())
	var unreachable *UnreachableError
	if !errors.As(err, &unreachable) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err %T %v", err, err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("gave up after %s, Timeout is 500ms", elapsed)
	}
	last := status.Code(errors.Unwrap(err))
	if !strings.Contains(err.Error(), address) ||
		(last != codes.Unavailable && last != codes.DeadlineExceeded) {
		t.Fatalf("the error should name %s and wrap the last attempt's: %v", address, err)
	}
}

func TestACancelledContextEndsTheRetries(t *testing.T) {
	c := New(closedPort(t))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Status(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("returned after %s", elapsed)
	}
}

func TestTLSConfigNamesTheFileAtFault(t *testing.T) {
	dir := t.TempDir()
	if _, err := TLSConfigFromDir(dir, "admin"); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(dir, "ca.crt")) {
		t.Fatalf("missing CA: %v", err)
	}
	write(t, filepath.Join(dir, "ca.crt"), "not a certificate")
	if _, err := TLSConfigFromDir(dir, "admin"); err == nil ||
		!strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA without PEM: %v", err)
	}
}

func TestNewFromEnv(t *testing.T) {
	t.Setenv(EnvController, "a:1,b:2")
	t.Setenv(EnvToken, "sft_x")
	t.Setenv(EnvCerts, "")
	t.Setenv(EnvClusterCA, "")
	t.Setenv(EnvClusterCrt, "")
	t.Setenv(EnvClusterKey, "")
	c, err := NewFromEnv()
	if err != nil || c.Token != "sft_x" || c.TLS != nil ||
		!slices.Equal(c.Addresses(), []string{"a:1", "b:2"}) {
		t.Fatalf("%v %+v", err, c)
	}
	t.Setenv(EnvClusterCA, "/ca.crt")
	if _, err := NewFromEnv(); err == nil || !strings.Contains(err.Error(), EnvClusterKey) {
		t.Fatalf("one TLS file of three: %v", err)
	}
	t.Setenv(EnvClusterCA, "")
	t.Setenv(EnvToken, "bad token")
	if _, err := NewFromEnv(); err == nil || !strings.Contains(err.Error(), EnvToken) {
		t.Fatalf("bad token: %v", err)
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	listener.Close()
	return address
}

func write(t *testing.T, path, text string) {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
