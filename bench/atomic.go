package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// atomicBatch measures what folding two writes of a solve (a solved event,
// compare-and-set on the task's records, and an outcome) into one atomic
// batch publish (nats-server 2.12+, AllowAtomicPublish) would cost, against
// two synchronous publishes, on a LazySync embedded server over TCP: the
// choice captchaq faced before the outcome became the solve's only record.
func (b *bench) atomicBatch() error {
	n := b.pick(1000, 6000)
	fmt.Printf("## 5. Atomic batch publish: one exchange for the solve's two writes?\n\n")
	fmt.Printf("%d solves per row, each writing a solved event (with `Nats-Expected-Last-Subject-Sequence`) and an outcome to a stream with `AllowAtomicPublish`, "+
		"LazySync, file storage, over TCP: as two synchronous publishes (what captchaq wrote per solve until the outcome became the solve's only record), and as one atomic batch (`Nats-Batch-Id`, `Nats-Batch-Sequence`, "+
		"the commit a request). nats-server stages every atomic batch of a file-backed single-replica stream in a file store of its own "+
		"(server/jetstream_batching.go, `newBatchStore`), which is what the second row pays for.\n\n", n)
	t := table{head: []string{"goroutines", "two publishes, solves/s", "one atomic batch, solves/s", "batch ÷ two"}}
	for _, par := range []int{8, 64} {
		two, err := runWrites(b.ctx, n, par, false)
		if err != nil {
			return err
		}
		batch, err := runWrites(b.ctx, n, par, true)
		if err != nil {
			return err
		}
		t.add(fmt.Sprint(par), fmt.Sprintf("%.0f", two), fmt.Sprintf("%.0f", batch), fmt.Sprintf("%.3f×", batch/two))
	}
	fmt.Printf("%s\n", t.String())
	return nil
}

// runWrites makes n solves' writes from par goroutines and returns solves/s.
func runWrites(ctx context.Context, n, par int, batch bool) (float64, error) {
	_, connect, stop, err := embedded(true, true)
	if err != nil {
		return 0, err
	}
	defer stop()
	nc, err := connect(nats.Name("bench-atomic"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ATOMIC", Subjects: []string{"atomic.>"}, AllowAtomicPublish: true}); err != nil {
		return 0, fmt.Errorf("create stream: %w", err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, par)
	start := time.Now()
	for range par {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				id := strconv.FormatInt(i, 10)
				ev := nats.NewMsg("atomic.events." + id)
				ev.Data = []byte(`{"kind":"solved","gen":1}`)
				ev.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
				out := nats.NewMsg("atomic.results." + id)
				out.Data = []byte(`{"status":"solved","solution":"tok"}`)
				if !batch {
					if _, err := js.PublishMsg(ctx, ev); err != nil {
						errs <- err
						return
					}
					if _, err := js.PublishMsg(ctx, out); err != nil {
						errs <- err
						return
					}
					continue
				}
				ev.Header.Set("Nats-Batch-Id", "b"+id)
				ev.Header.Set("Nats-Batch-Sequence", "1")
				out.Header.Set("Nats-Batch-Id", "b"+id)
				out.Header.Set("Nats-Batch-Sequence", "2")
				out.Header.Set("Nats-Batch-Commit", "1")
				if err := nc.PublishMsg(ev); err != nil {
					errs <- err
					return
				}
				r, err := nc.RequestMsgWithContext(ctx, out)
				if err != nil {
					errs <- err
					return
				}
				if len(r.Data) == 0 || r.Header.Get("Nats-Service-Error") != "" {
					errs <- fmt.Errorf("batch commit answered %q", r.Data)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
