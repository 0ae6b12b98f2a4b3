package wire

import (
	"os/exec"
	"strings"
	"testing"
)

// TestContractLinksNoClient checks what a producer links with the contract:
// the method catalogue, never the HTTP client of the solving service
// (solver) nor OpenTelemetry.
func TestContractLinksNoClient(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if d == "github.com/captchaq/captchaq/solver" || strings.Contains(d, "opentelemetry") {
			t.Errorf("stream/wire links %s", d)
		}
	}
}
