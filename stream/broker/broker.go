// Package broker runs an embedded nats-server with JetStream: what
// `captchaq server` and `captchaq run` serve, and what tests and benchmarks
// start in-process. It is a package of its own so that a service that only
// submits tasks or runs workers (package stream) does not link nats-server.
package broker

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an embedded nats-server. The zero value runs an
// in-process-only server (no TCP port) with its JetStream store in a new
// temporary directory, encrypted with a key of its own, and fsync before
// every acknowledgement.
type Config struct {
	// ConfigFile is a nats-server config file (nats.conf) to load first; the
	// fields below override what it says when they are set.
	ConfigFile string
	// StoreDir is where JetStream keeps its files. Default: the config
	// file's store_dir, else a new temporary directory, removed when the
	// server shuts down.
	StoreDir string
	// Listen makes the server accept TCP clients on Host:Port (Port -1 picks
	// a free one). Without it, and without a config file, only in-process
	// connections (nats.InProcessServer) reach the server.
	Listen bool
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port to listen on. Default 4222 from a config file, else -1 (random).
	Port int
	// LazySync restores nats-server's default of fsyncing every two minutes:
	// faster, but an OS crash or power loss can lose tasks the server
	// already acknowledged. The default is sync_interval: always.
	LazySync bool
	// MaxPayload, set, is the server's max_payload in bytes, over the
	// config file's and the default (4 MB).
	MaxPayload int32
	// Logger receives the server's log lines at Warn and above (Debug with
	// Verbose). Default: none.
	Logger *slog.Logger
	// Verbose forwards the server's notices too.
	Verbose bool
	// StoreKey encrypts the JetStream store at rest (nats-server's
	// ChaCha20-Poly1305 encryption; a config file's `jetstream { key }`
	// does the same). At least MinStoreKeyLen characters. Default: the
	// config file's key; else, for a temporary store, a random key that
	// lives as long as the server; else none: a plaintext store.
	//
	// An encrypted store keeps every message's bytes (page URLs among them)
	// unreadable on disk without the key, from the moment it is stored; a
	// plaintext store holds them readable until a worker erases them, at
	// the price of a block rewrite per message (stream/internal/completer, erase.go).
	StoreKey string
}

// MinStoreKeyLen is the shortest StoreKey accepted: 32 characters, such as
// 16 random bytes in hex (`openssl rand -hex 32` gives 64).
const MinStoreKeyLen = 32

// Start starts an embedded nats-server with JetStream and waits until it
// accepts connections. Shut it down with Shutdown and WaitForShutdown.
func Start(cfg Config) (*server.Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		opts, err = server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", cfg.ConfigFile, err)
		}
	} else {
		opts.Host = "127.0.0.1"
		opts.Port = -1
		opts.DontListen = !cfg.Listen
		opts.MaxPayload = 4 << 20 // a 1024 KB image, base64 in JSON, with room
	}
	opts.JetStream = true
	opts.NoSigs = true
	if cfg.MaxPayload > 0 {
		opts.MaxPayload = cfg.MaxPayload
	}
	if cfg.Host != "" {
		opts.Host = cfg.Host
	}
	if cfg.Port != 0 {
		opts.Port = cfg.Port
	}
	if cfg.Listen {
		opts.DontListen = false
	}
	if cfg.StoreDir != "" {
		opts.StoreDir = cfg.StoreDir
	}
	if cfg.StoreKey != "" {
		opts.JetStreamKey = cfg.StoreKey
		opts.JetStreamCipher = server.ChaCha
	}
	if k := opts.JetStreamKey; k != "" && len(k) < MinStoreKeyLen {
		// The key's length only: the key itself is never in a message.
		return nil, fmt.Errorf("the store key is %d characters; at least %d are needed (e.g. `openssl rand -hex 32`)", len(k), MinStoreKeyLen)
	}
	if err := portsFree(opts); err != nil {
		return nil, err
	}
	tempDir := ""
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "captchaq-js-")
		if err != nil {
			return nil, fmt.Errorf("temporary store: %w", err)
		}
		opts.StoreDir, tempDir = dir, dir
		if opts.JetStreamKey == "" {
			// The store lives as long as the server, so can its key.
			opts.JetStreamKey, opts.JetStreamCipher = rand.Text()+rand.Text(), server.ChaCha
		}
	}
	if opts.JetStreamKey == "" && cfg.Logger != nil {
		cfg.Logger.Warn("the JetStream store is not encrypted at rest: page URLs are readable in its files until workers erase them, one block rewrite per finished task (slow at high rates); set a store key (CAPTCHAQ_STORE_KEY) to encrypt it",
			slog.String("store", opts.StoreDir))
	}
	if !cfg.LazySync && opts.SyncInterval == 0 {
		opts.SyncAlways = true
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("new nats-server: %w", err)
	}
	maxStoreSet.Store(ns, opts.JetStreamMaxStore)
	encrypted.Store(ns, opts.JetStreamKey != "")
	go func() { ns.WaitForShutdown(); maxStoreSet.Delete(ns); encrypted.Delete(ns) }()
	if cfg.Logger != nil {
		ns.SetLoggerV2(&slogAdapter{l: cfg.Logger, verbose: cfg.Verbose}, false, false, false)
	}
	go ns.Start()
	if tempDir != "" {
		// A store we made up goes away with the server.
		go func() { ns.WaitForShutdown(); _ = os.RemoveAll(tempDir) }()
	}
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats-server not ready within 30s")
	}
	if err := checkStoreOpened(ns, opts); err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, err
	}
	return ns, nil
}

// encrypted holds, for every server Start runs, whether its store is
// encrypted at rest.
var encrypted sync.Map // *server.Server → bool

// StoreEncrypted reports whether the store of ns, a server Start runs, is
// encrypted at rest: then a deleted message leaves nothing readable in the
// store's files, and there is nothing to erase.
func StoreEncrypted(ns *server.Server) bool {
	v, ok := encrypted.Load(ns)
	return ok && v.(bool)
}

// checkStoreOpened fails when the store holds a file-backed stream that the
// server did not open. nats-server skips, with a log line, a stream it
// cannot decrypt (another key, or no key for an encrypted store) and then
// answers "stream not found": whoever ensures the topology next would
// create a new, empty stream over the old one's directory, and every task
// and outcome it held would be lost. A clustered server recovers its
// streams later, through its meta group, so only a standalone one is
// checked.
func checkStoreOpened(ns *server.Server, opts *server.Options) error {
	if ns.JetStreamIsClustered() {
		return nil
	}
	dir := ns.JetStreamConfig().StoreDir
	accounts, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read the store %s: %w", dir, err)
	}
	// The directories first, then what the server opened: a client that
	// connects the moment the server listens (a worker started before it,
	// waiting) may create a stream meanwhile, and that one must count as
	// opened, not as a stream the server could not read.
	type onDisk struct{ account, stream string }
	var found []onDisk
	for _, acc := range accounts {
		if !acc.IsDir() {
			continue
		}
		streams, err := os.ReadDir(filepath.Join(dir, acc.Name(), "streams"))
		if err != nil {
			continue // not an account's directory
		}
		for _, st := range streams {
			if st.IsDir() {
				found = append(found, onDisk{acc.Name(), st.Name()})
			}
		}
	}
	info, err := ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return fmt.Errorf("list the streams nats-server opened: %w", err)
	}
	opened := map[string]bool{}
	for _, acc := range info.AccountDetails {
		for _, st := range acc.Streams {
			opened[acc.Name+"/"+st.Name] = true
		}
	}
	for _, f := range found {
		if !opened[f.account+"/"+f.stream] {
			if acc, err := ns.LookupAccount(f.account); err != nil || !acc.JetStreamEnabled() {
				// Written under a configuration that put its users in
				// another account: nats-server opens a stream only in its
				// own account, and a client would create an empty one in
				// the new account beside it.
				return fmt.Errorf("the store %s holds stream %s of account %s, which this configuration does not give JetStream "+
					"(the shipped nats.conf keeps the streams in account CAPTCHAQ and producers in PRODUCERS, so that no reply subject a producer names is ever stored; "+
					"a store written before that holds them in the global account $G): not starting, so that nothing creates an empty stream beside it. "+
					"Start the previous configuration until the queue is empty, then start this one with another store directory "+
					"(keep the old one for its records: the previous configuration reads it)",
					dir, f.stream, f.account)
			}
			why := "it is encrypted with another key than the one given"
			if opts.JetStreamKey == "" {
				why = "it is encrypted and no store key is set"
			}
			return fmt.Errorf("the store %s holds stream %s (account %s), which nats-server could not open: %s, or its files are damaged (the server's log says which); "+
				"not starting, so that nothing creates an empty stream over it: start again with the key it was written with (CAPTCHAQ_STORE_KEY)",
				dir, f.stream, f.account, why)
		}
	}
	return nil
}

// slogAdapter turns nats-server's logger interface into slog records.
type slogAdapter struct {
	l       *slog.Logger
	verbose bool
}

func (a *slogAdapter) Noticef(format string, v ...any) {
	if a.verbose {
		a.l.Info(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
	}
}
func (a *slogAdapter) Warnf(format string, v ...any) {
	a.l.Warn(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
}
func (a *slogAdapter) Fatalf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
}
func (a *slogAdapter) Errorf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
}
func (a *slogAdapter) Debugf(format string, v ...any) {
	if a.verbose {
		a.l.Debug(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
	}
}
func (a *slogAdapter) Tracef(string, ...any) {}

// portsFree says at once which fixed port of opts (clients', leaf nodes',
// the cluster's) something else holds: nats-server would log it and never
// become ready, and Start would wait 30s to say only that.
func portsFree(opts *server.Options) error {
	for _, p := range []struct {
		what, host string
		port       int
	}{
		{"clients", opts.Host, opts.Port},
		{"leaf nodes", opts.LeafNode.Host, opts.LeafNode.Port},
		{"the cluster", opts.Cluster.Host, opts.Cluster.Port},
	} {
		if p.port <= 0 || (p.what == "clients" && opts.DontListen) {
			continue
		}
		addr := net.JoinHostPort(p.host, strconv.Itoa(p.port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s (%s): %w", addr, p.what, err)
		}
		_ = l.Close()
	}
	return nil
}
