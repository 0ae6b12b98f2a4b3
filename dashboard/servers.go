package dashboard

import (
	"net/http"
	"time"

	"github.com/captchaq/captchaq/stream"
)

// serversPage is the server page's read: the workers seen within the
// heartbeat's life (each a process solving for the queue, as asynqmon
// lists its servers), a page at a time, with the NATS server the
// dashboard is connected to, the streams it holds and its store.
type serversPage struct {
	page[workerRow]
	Server stream.ServerInfo `json:"server"`
}

// workerRow is a worker as the server page lists it.
type workerRow struct {
	stream.WorkerInfo
	// UpSeconds is how long it has been taking tasks: until now while it
	// runs, until its last heartbeat once it stopped.
	UpSeconds float64 `json:"up_seconds"`
}

// serverList answers the server page: the filter's page of the workers
// (id: a part of the name) and the server. Both are read at most once per
// refresh interval, whoever asks.
func (d *Dashboard) serverList(w http.ResponseWriter, r *http.Request) {
	f, err := queryOf(r.URL.Query()).parse(time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	si, err := d.server.get(r.Context(), d.fresh(), d.cfg.Client.Server)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	ws, err := d.workers.get(r.Context(), d.fresh(), d.cfg.Client.Workers)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	rows := make([]workerRow, len(ws))
	for i, x := range ws {
		until := time.Now()
		if x.Stopped {
			until = x.At
		}
		rows[i] = workerRow{WorkerInfo: x, UpSeconds: until.Sub(x.Started).Seconds()}
	}
	p := paginate(rows, f, func(x workerRow) bool { return f.idMatch(x.Name) }, func(workerRow) string { return "" })
	writeJSON(w, http.StatusOK, serversPage{page: p, Server: si})
}
