package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream"
)

func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("server", "[flags]", stderr)
	config := fs.String("config", "nats.conf", "nats-server config file; empty or missing ./nats.conf: built-in defaults (127.0.0.1:4222)")
	store := fs.String("store", "", "JetStream store directory (default: the config's store_dir, else ./data/jetstream)")
	lazy := fs.Bool("lazy-sync", false, "fsync every 2 minutes instead of before every ack (faster; an OS crash can lose acknowledged tasks)")
	var top topoFlags
	top.register(fs)
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	cfg := stream.ServerConfig{StoreDir: *store, LazySync: *lazy, Logger: log, Verbose: true, Listen: true}
	switch _, statErr := os.Stat(*config); {
	case *config == "":
	case statErr == nil:
		cfg.ConfigFile = *config
	case errors.Is(statErr, os.ErrNotExist) && *config == "nats.conf":
		log.Warn("no ./nats.conf: built-in defaults, 127.0.0.1:4222 without authentication")
	default:
		return fmt.Errorf("--config %s: %w", *config, statErr)
	}
	if cfg.ConfigFile == "" {
		cfg.Port = 4222
		if cfg.StoreDir == "" {
			cfg.StoreDir = "data/jetstream"
		}
	}
	ns, err := stream.StartServer(cfg)
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown() // flushes and closes the JetStream store
		ns.WaitForShutdown()
		log.Info("server stopped")
	}()

	// Create or bring up to date the topology, as the system account's owner.
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.UserInfo(os.Getenv("CAPTCHAQ_ADMIN_USER"), os.Getenv("CAPTCHAQ_ADMIN_PASSWORD")))
	if err != nil {
		return fmt.Errorf("connect in-process: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := stream.EnsureTopology(tctx, js, top.topology(), true); err != nil {
		return fmt.Errorf("topology: %w (with authentication on, set CAPTCHAQ_ADMIN_USER and CAPTCHAQ_ADMIN_PASSWORD)", err)
	}
	fmt.Fprintf(stdout, "captchaq server ready on %s (store %s)\n", ns.ClientURL(), ns.JetStreamConfig().StoreDir)
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}
