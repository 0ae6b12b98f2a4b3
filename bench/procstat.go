package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// fetchProfile writes a CPU profile of the serve subprocess taken over d.
func fetchProfile(ctx context.Context, addr, path string, d time.Duration) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, max(int(d.Seconds()), 1))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("server profile: %w", err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("server profile: %w", err)
	}
	return f.Close()
}

// cpuTime returns the user and system CPU time a process (0: this one) has
// used, from /proc/<pid>/stat, or 0 if it cannot be read. It assumes the
// usual 100 clock ticks per second.
func cpuTime(pid int) time.Duration {
	path := "/proc/self/stat"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count fields after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func dirSize(dir string) int64 {
	var n int64
	_ = walk(dir, func(size int64) { n += size })
	return n
}

func walk(dir string, f func(int64)) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = walk(dir+"/"+e.Name(), f)
			continue
		}
		if info, err := e.Info(); err == nil {
			f(info.Size())
		}
	}
	return nil
}
