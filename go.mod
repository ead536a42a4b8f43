// The Go packages of this repository: the generated API (gen/go/servefleet/v1)
// and the client (clients/go/servefleet). Requirements are the versions the
// code is generated for and tested with (Debian 12's golang-google-grpc-dev and
// golang-google-protobuf-dev; tests/test_go_module.py checks they agree).
// No go.sum is kept: this machine reaches no module proxy (GOPATH mode builds
// here), and `go get` writes the sums on the user's side.
module github.com/servefleet/servefleet

go 1.16

require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
