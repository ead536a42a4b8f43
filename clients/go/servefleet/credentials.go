package servefleet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The variables NewFromEnv reads, as the servefleet command does.
const (
	EnvController = "SERVEFLEET_CONTROLLER" // addresses, comma-separated
	EnvCerts      = "SERVEFLEET_CERTS"      // a `servefleet certs init` directory
	EnvToken      = "SERVEFLEET_TOKEN"      // a bearer token
	// Or the TLS files one by one.
	EnvClusterCA  = "SERVEFLEET_CLUSTER_CA"
	EnvClusterCrt = "SERVEFLEET_CLUSTER_CERT"
	EnvClusterKey = "SERVEFLEET_CLUSTER_KEY"
)

// TLSConfig returns the client side of the cluster's mutual TLS: the
// cluster's CA certificate (which the controllers' certificates must chain
// to) and this client's certificate and key, all PEM files. The server name
// checked is the address's host (`servefleet certs init` names localhost,
// 127.0.0.1 and ::1, and each --host); set ServerName on the result for
// another. An error names the file at fault.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("servefleet: cluster CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("servefleet: cluster CA %s: no PEM certificate in it", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("servefleet: client certificate %s with key %s: %w",
			certFile, keyFile, err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair},
		MinVersion: tls.VersionTLS12}, nil
}

// TLSConfigFromDir is TLSConfig of a `servefleet certs init` directory:
// DIR/ca.crt, DIR/<role>.crt and DIR/<role>.key (role "admin" is the CLI's).
func TLSConfigFromDir(dir, role string) (*tls.Config, error) {
	return TLSConfig(filepath.Join(dir, "ca.crt"), filepath.Join(dir, role+".crt"),
		filepath.Join(dir, role+".key"))
}

// NewFromEnv returns a client configured as the servefleet command is:
// addresses from SERVEFLEET_CONTROLLER (else DefaultAddress), mutual TLS
// from SERVEFLEET_CERTS (DIR/admin.crt) or SERVEFLEET_CLUSTER_CA, _CERT and
// _KEY, the token from SERVEFLEET_TOKEN. An error names a variable set to
// something that cannot work.
func NewFromEnv() (*Client, error) {
	client := New(os.Getenv(EnvController))
	client.Token = os.Getenv(EnvToken)
	if problem := tokenProblem(client.Token); client.Token != "" && problem != "" {
		return nil, fmt.Errorf("servefleet: %s: %s", EnvToken, problem)
	}
	ca, crt, key := os.Getenv(EnvClusterCA), os.Getenv(EnvClusterCrt), os.Getenv(EnvClusterKey)
	var err error
	switch dir := os.Getenv(EnvCerts); {
	case dir != "":
		client.TLS, err = TLSConfigFromDir(dir, "admin")
	case ca != "" && crt != "" && key != "":
		client.TLS, err = TLSConfig(ca, crt, key)
	case ca != "" || crt != "" || key != "":
		err = errors.New("servefleet: mutual TLS needs all of " + EnvClusterCA + ", " +
			EnvClusterCrt + " and " + EnvClusterKey + " (or " + EnvCerts + ")")
	}
	if err != nil {
		return nil, err
	}
	return client, nil
}

// tokenProblem says why token cannot be sent as a bearer token (RFC 6750's
// b64token: letters, digits and -._~+/, then = padding), or "" when it can.
// gRPC would refuse such metadata with a bare INTERNAL; the controller
// reads the same rule.
func tokenProblem(token string) string {
	if token == "" {
		return "the token is empty"
	}
	padding, position := false, 0
	for _, r := range token {
		position++
		switch {
		case r <= ' ' || r >= 0x7f:
			return fmt.Sprintf("the token holds %U at character %d; a token is printable ASCII",
				r, position)
		case r == '=':
			padding = true
		case padding || !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' ||
			r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' || r == '~' ||
			r == '+' || r == '/'):
			return "the token holds characters a bearer token cannot have (letters, " +
				"digits and -._~+/ then = padding only)"
		}
	}
	if token[0] == '=' {
		return "the token is padding only"
	}
	return ""
}
