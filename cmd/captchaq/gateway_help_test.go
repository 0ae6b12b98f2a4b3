package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// `captchaq gateway --help` names both dialects it serves: a newcomer
// with a createTask client learns from it that the gateway takes one.
func TestGatewayHelpNamesBothDialects(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	_ = runGateway(context.Background(), []string{"--help"}, &out, &errOut)
	help := out.String() + errOut.String()
	require.Contains(t, help, "in.php")
	require.Contains(t, help, "createTask")
}
