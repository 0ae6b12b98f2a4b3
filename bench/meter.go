package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"syscall"
	"time"
)

// Settling after a run: the CPU a run costs includes the work its systems
// do after the last task completed (acks, deletes and erasures in the
// background, asynq marking its tasks done), so a meter keeps reading until
// a settleWindow passes with at most settleIdle of CPU used, or settleMax
// passed.
const (
	settleWindow = 200 * time.Millisecond
	settleIdle   = 10 * time.Millisecond // 5 % of one core over the window
	settleMax    = 15 * time.Second
)

// meter measures the CPU time one run costs: this process (which embeds the
// nats-server of the JetStream rows) and, when brokerPID is set, the broker
// process beside it (a redis-server). Optionally it writes a CPU profile of
// this process over the same window.
type meter struct {
	brokerPID int
	self0     time.Duration
	broker0   time.Duration
	profile   *os.File
}

// cpuUse is what a meter measured.
type cpuUse struct {
	// Total is the CPU time (user + system) of this process and the broker
	// process from the start of the run until it settled.
	Total time.Duration
	// Settled is false when the processes were still busy settleMax after
	// the last completion: Total is then a lower bound.
	Settled bool
	// Broker says whether Total includes a broker process of its own (false
	// for in-process servers).
	Broker bool
}

// startMeter starts measuring. brokerPID 0 means the broker runs in this
// process; profile, when not empty, is the file the CPU profile goes to.
func startMeter(brokerPID int, profile string) (*meter, error) {
	m := &meter{brokerPID: brokerPID}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile %s: %w", profile, err)
		}
		m.profile = f
	}
	m.self0, m.broker0 = selfCPU(), m.brokerCPU()
	return m, nil
}

func (m *meter) brokerCPU() time.Duration {
	if m.brokerPID <= 0 {
		return 0
	}
	return cpuTime(m.brokerPID)
}

// settle waits until the measured processes go quiet (or settleMax passes),
// stops the profile and returns the CPU used since startMeter, not counting
// the final quiet window.
func (m *meter) settle() (cpuUse, error) {
	use := cpuUse{Broker: m.brokerPID > 0}
	read := func() time.Duration { return selfCPU() - m.self0 + m.brokerCPU() - m.broker0 }
	deadline := time.Now().Add(settleMax)
	last := read()
	for time.Now().Before(deadline) {
		time.Sleep(settleWindow)
		now := read()
		if now-last <= settleIdle {
			use.Settled = true
			break
		}
		last = now
	}
	use.Total = last
	if m.profile != nil {
		pprof.StopCPUProfile()
		if err := m.profile.Close(); err != nil {
			return use, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return use, nil
}

// selfCPU is the user and system CPU time this process has used, all its
// threads together, to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
