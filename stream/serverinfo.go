package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/room"
)

// ServerInfo is what a client sees of the NATS server it is connected to
// and of the streams captchaq keeps there, as the dashboard's server page
// shows it. It needs no more than a producer's rights, and never holds a
// task's body, a token or a credential.
type ServerInfo struct {
	// At is when it was read.
	At time.Time `json:"at"`
	// Name, Version and ID are the connected server's, from its INFO;
	// Cluster its cluster's name, empty when it runs alone.
	Name    string `json:"name"`
	Version string `json:"version"`
	ID      string `json:"id"`
	Cluster string `json:"cluster,omitempty"`
	// URL is the address connected to, without credentials; Known are the
	// servers the client may fail over to (the cluster's, as INFO gossips
	// them).
	URL   string   `json:"url"`
	Known []string `json:"known,omitempty"`
	// RTT is the round trip to the server when read; RTTMS in ms for JSON.
	RTT   time.Duration `json:"-"`
	RTTMS float64       `json:"rtt_ms"`
	// AuthRequired says the server checks users; false on a local trial
	// (no users), where anyone may change anything.
	AuthRequired bool `json:"auth_required"`
	// Streams are the tasks' stream and the token stream.
	Streams []StreamSummary `json:"streams"`
	// Store is the broker's store, as the server that runs it reports it;
	// nil when it reports none (a plain nats-server).
	Store *StoreStatus `json:"store,omitempty"`
}

// StreamSummary is one stream's configuration limits, contents and
// replicas.
type StreamSummary struct {
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	Replicas int       `json:"replicas"`
	// Storage is "file" or "memory"; MaxBytes the stream's byte limit (-1:
	// none but the store's) and MaxAge how long it keeps a message (0:
	// for ever), in seconds for JSON.
	Storage       string  `json:"storage"`
	MaxBytes      int64   `json:"max_bytes"`
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	// Messages, Bytes, FirstSeq and LastSeq are its contents now;
	// Consumers how many consumers read it.
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	FirstSeq  uint64 `json:"first_seq"`
	LastSeq   uint64 `json:"last_seq"`
	Consumers int    `json:"consumers"`
	// Leader is the server that leads it in a cluster, and Peers its
	// other replicas; both empty on a single server.
	Leader string     `json:"leader,omitempty"`
	Peers  []PeerInfo `json:"peers,omitempty"`
}

// PeerInfo is a replica of a stream other than its leader.
type PeerInfo struct {
	Name string `json:"name"`
	// Current says it has every message the leader has; Lag counts the
	// operations it is behind, Offline says it does not answer, and
	// ActiveSeconds is how long ago it was last heard from.
	Current       bool    `json:"current"`
	Offline       bool    `json:"offline,omitempty"`
	Lag           uint64  `json:"lag"`
	ActiveSeconds float64 `json:"active_seconds"`
}

// Server reads the connected server's identity, the two streams' state
// and the store's status.
func (c *Client) Server(ctx context.Context) (ServerInfo, error) {
	si := ServerInfo{At: c.cfg.Now(), Name: c.nc.ConnectedServerName(), Version: c.nc.ConnectedServerVersion(),
		ID: c.nc.ConnectedServerId(), Cluster: c.nc.ConnectedClusterName(), URL: c.nc.ConnectedUrlRedacted(),
		Known: c.nc.DiscoveredServers(), AuthRequired: c.nc.AuthRequired()}
	if rtt, err := c.nc.RTT(); err == nil {
		si.RTT, si.RTTMS = rtt, float64(rtt.Microseconds())/1000
	}
	for _, s := range []jetstream.Stream{c.s, c.tokens} {
		info, err := s.Info(ctx)
		if err != nil {
			return si, fmt.Errorf("read stream %s: %w", s.CachedInfo().Config.Name, err)
		}
		si.Streams = append(si.Streams, summarize(info))
	}
	sctx, cancel := context.WithTimeout(ctx, room.StatusTimeout)
	defer cancel()
	if store, err := ReadStoreStatus(sctx, c.nc); err == nil {
		si.Store = &store
	}
	return si, nil
}

func summarize(info *jetstream.StreamInfo) StreamSummary {
	s := StreamSummary{Name: info.Config.Name, Created: info.Created, Replicas: info.Config.Replicas, Storage: info.Config.Storage.String(),
		MaxBytes: info.Config.MaxBytes, MaxAgeSeconds: info.Config.MaxAge.Seconds(),
		Messages: info.State.Msgs, Bytes: info.State.Bytes, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq, Consumers: info.State.Consumers}
	if cl := info.Cluster; cl != nil {
		s.Leader = cl.Leader
		for _, p := range cl.Replicas {
			s.Peers = append(s.Peers, PeerInfo{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag, ActiveSeconds: p.Active.Seconds()})
		}
	}
	return s
}
