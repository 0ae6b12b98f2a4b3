package stream

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
)

// BenchmarkSubmit measures the cost of fsync before every ack: one Submit
// (a synchronous publish, file storage) at a time, as a producer does.
//
//	go test ./stream/ -run '^$' -bench BenchmarkSubmit -benchtime 2000x
func BenchmarkSubmit(b *testing.B) {
	for _, lazy := range []bool{false, true} {
		name := "sync_always"
		if lazy {
			name = "lazy_2m"
		}
		b.Run(name, func(b *testing.B) {
			ns, err := broker.Start(broker.Config{StoreDir: b.TempDir(), LazySync: lazy})
			require.NoError(b, err)
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			nc, err := nats.Connect("", nats.InProcessServer(ns))
			require.NoError(b, err)
			defer nc.Close()
			ctx := b.Context()
			ensureAsAdmin(b, nc, Topology{})
			c, err := NewClient(ctx, nc, ClientConfig{})
			require.NoError(b, err)
			b.ResetTimer()
			for i := range b.N {
				if _, err := c.Submit(ctx, turnstileTask(fmt.Sprintf("bench-%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}
