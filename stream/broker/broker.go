// Package broker runs an embedded nats-server with JetStream: what
// `captchaq server` and `captchaq run` serve, and what tests and benchmarks
// start in-process. It is a package of its own so that a service that only
// submits tasks or runs workers (package stream) does not link nats-server.
package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an embedded nats-server. The zero value runs an
// in-process-only server (no TCP port) with its JetStream store in a new
// temporary directory and fsync before every acknowledgement.
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
	// Logger receives the server's log lines at Warn and above (Debug with
	// Verbose). Default: none.
	Logger *slog.Logger
	// Verbose forwards the server's notices too.
	Verbose bool
}

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
	tempDir := ""
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "captchaq-js-")
		if err != nil {
			return nil, fmt.Errorf("temporary store: %w", err)
		}
		opts.StoreDir, tempDir = dir, dir
	}
	if !cfg.LazySync && opts.SyncInterval == 0 {
		opts.SyncAlways = true
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("new nats-server: %w", err)
	}
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
	return ns, nil
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
