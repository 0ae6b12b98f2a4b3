package gateway_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

func TestParseKeys(t *testing.T) {
	t.Parallel()
	keys, err := gateway.ParseKeys([]byte(`{"keys": [
		{"key": "crawler-0123456789abcdef", "producer": "crawler", "priority": "high", "deadline": "5m", "share": 0.5},
		{"key": "checkout-0123456789abcdef", "producer": "checkout", "client": "capsolver"}]}`))
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, createtask.FamilyCapSolver, keys[1].Client)
	require.Equal(t, gateway.Duration(5*time.Minute), keys[0].Deadline)
	require.Equal(t, 0.5, keys[0].Share)

	for _, tc := range []struct{ file, want string }{
		{`{"keys": []}`, "no keys"},
		{`{"keys": [{"key": "short", "producer": "a"}]}`, "keys[0]: key: at least 16 characters"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a-b"}]}`, `producer "a-b"`},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a", "share": 2}]}`, "share 2"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a", "priorty": "high"}]}`, `unknown field "priorty"`},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a", "deadline": "soon"}]}`, "soon"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a", "client": "CapSolver"}]}`, `keys[0]: client "CapSolver": want "capsolver"`},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a"}, {"key": "crawler-0123456789abcdef", "producer": "b"}]}`, "keys[1] (producer b): the same key"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a"}, {"key": "checkout-0123456789abcdef", "producer": "a"}]}`, "producer a named twice"},
		{`{"keys": [{"key": "                ", "producer": "a"}]}`, "keys[0]: key: blank"},
		{`{"keys": [{"key": "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t", "producer": "a"}]}`, "keys[0]: key: blank"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a"}, {"key": "crawler-01234567\u0000abcdef", "producer": "b"}]}`, "keys[1]: key: holds a space or a control character"},
		{`{"keys": [{"key": "crawler 0123456789abcdef", "producer": "a"}]}`, "keys[0]: key: holds a space"},
		{`{"keys": [{"key": "crawler-0123456789abcdef\n", "producer": "a"}]}`, "keys[0]: key: holds a space or a control character"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a", "deadline": "1ns"}]}`, "keys[0]: deadline 1ns: shorter than 30s"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a", "deadline": "29s"}]}`, "keys[0]: deadline 29s"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a"}]} {"keys": [{"key": "checkout-0123456789abcdef", "producer": "b"}]}`, "data after the JSON object"},
		{`{"keys": [{"key": "crawler-0123456789abcdef", "producer": "a"}]} trailing`, "data after the JSON object"},
	} {
		_, err := gateway.ParseKeys([]byte(tc.file))
		require.ErrorContains(t, err, tc.want, tc.file)
	}
}
