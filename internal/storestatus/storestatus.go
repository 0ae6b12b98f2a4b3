// Package storestatus answers the store status requests of a captchaq
// server's clients from a watch of its embedded nats-server's store: how
// `captchaq server`, `captchaq run` and the benchmarks tell workers how full
// the store is and whether it is encrypted at rest.
package storestatus

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// Serve watches ns's store (broker.WatchStore with cfg) and answers the
// store status requests on nc (stream.ServeStoreStatus) from what the watch
// sees, until stop is called.
func Serve(ns *server.Server, nc *nats.Conn, cfg broker.GuardConfig) (stop func(), err error) {
	g := broker.WatchStore(ns, cfg)
	sub, err := stream.ServeStoreStatus(nc, func() stream.StoreStatus {
		st := g.Status()
		return stream.StoreStatus{At: st.At, Dir: st.Dir, MaxStore: st.MaxStore, Used: st.Used, Free: st.Free, Room: st.Room,
			Refusing: st.Refusing, Error: st.Error, Action: st.Action, Encrypted: broker.StoreEncrypted(ns)}
	})
	if err != nil {
		g.Stop()
		return nil, err
	}
	return func() { _ = sub.Unsubscribe(); g.Stop() }, nil
}
