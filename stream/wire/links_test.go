package wire

import (
	"os/exec"
	"strings"
	"testing"
)

// TestContractLinksNoClient checks what a producer links with the contract:
// the method catalogue and the standard library, never an HTTP stack
// (net/http), the NATS client (its headers are plain maps here), the HTTP
// client of the solving service (solver) nor OpenTelemetry.
func TestContractLinksNoClient(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		switch {
		case d == "net/http", strings.HasPrefix(d, "net/http/"),
			strings.HasPrefix(d, "github.com/nats-io/"),
			d == "github.com/captchaq/captchaq/solver", strings.HasPrefix(d, "github.com/captchaq/captchaq/solver/"),
			strings.Contains(d, "opentelemetry"):
			t.Errorf("stream/wire links %s", d)
		}
	}
}
