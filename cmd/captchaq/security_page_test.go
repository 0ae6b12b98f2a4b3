package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/security.md's block reads what no earlier block of the page makes:
// the binary ./captchaq, the three roles' passwords and the store key's
// file. Followed literally on a fresh clone it printed "./captchaq: No such
// file or directory" three times; the prose before it must say where each
// comes from.
func TestSecurityBlockSaysWhatItNeeds(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	require.NoError(t, err)
	page := string(b)
	block := shellBlocks(page, "sh")[0]
	i := strings.Index(page, block)
	require.Positive(t, i)
	before := page[max(0, i-1500):i] // the paragraphs just above it
	for _, need := range []string{"./captchaq", "PRODUCER_PW", "WORKER_PW", "ADMIN_PW", "/etc/captchaq/store.key"} {
		require.Contains(t, block, need, "the block reads it")
	}
	for _, need := range []string{"go build -o captchaq ./cmd/captchaq", "PRODUCER_PW", "WORKER_PW", "ADMIN_PW", "/etc/captchaq/store.key"} {
		require.True(t, strings.Contains(before, need), "the prose just above the block says where %s comes from", need)
	}
}
