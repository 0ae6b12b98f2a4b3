// Package dashboard serves captchaq's live web dashboard: queues by lane and
// priority (queued, solving, retrying) with each lane's pause, the plan's
// threads in use, the workers alive (and a banner while any says its
// solving service does not answer), solve times by method, the throughput
// and depth of the last hour (or 6 or 24 h), and three lists an operator
// pages and filters through: the tasks that wait or run, the outcomes, and
// the dead letters, each with a task's trace beside it; and a server page:
// the NATS server it is connected to, the streams and store there, and
// every worker seen (host, PID, threads, uptime, the tasks at the service).
// The page's address names the tab, its filters, its page and the trace
// shown.
//
// The page is one HTML file, a stylesheet and a plain script, embedded in the
// binary: nothing is fetched from elsewhere and nothing is built at run
// time. The page comes with the stream's snapshot of the moment in it, and
// is kept up to date by server-sent events (/api/events), one snapshot of
// the stream per refresh interval; the lists are read once per
// interval (or less often while a read takes long) whoever asks, and served
// a page at a time.
//
// The dashboard answers only to the Hosts it serves (Config.Hosts: its
// listen address and the names it is reached by): a page of another name
// that resolves to it (DNS rebinding) gets nothing, not even the page.
//
// Reading needs no more than the dashboard's own NATS connection (a producer
// may read everything). Changing anything (replay, delete or purge dead
// letters, cancel a task, pause or resume a lane) takes the operator's own
// NATS credentials, checked when the operator signs in and sent with each
// request (HTTP Basic, from the page's sign-in form, never stored by the
// browser as site credentials); the dashboard connects with them and first
// checks that they carry the admin's permissions (JetStream account info,
// which nats.conf grants the admin alone), so producer credentials are
// refused before anything is done. On a server without users (a local
// trial) any name would pass that check: the page says so, and so does the
// reply to a sign-in. Those requests are POSTs with a JSON
// body, a token of this dashboard's in a header, and, when the browser sends
// one, an Origin of one of its Hosts: a page of another site cannot make
// them.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream"
)

//go:embed static
var static embed.FS

// Config configures a dashboard.
type Config struct {
	// Client reads the stream for the page. Required.
	Client *stream.Client
	// Connect opens a NATS connection with the operator's credentials, for
	// one change. Required for changes; nil makes the dashboard read-only.
	Connect func(ctx context.Context, user, password string) (*nats.Conn, error)
	// Refresh is how often the page gets a new snapshot. Default 1s.
	Refresh time.Duration
	// Token, when set, is required of every request (query ?token= once,
	// then a cookie): for a dashboard listening beyond loopback.
	Token string
	// Hosts are the Hosts the dashboard answers to (HostsOf): its listen
	// address and the names it is reached by, each a host name (any port)
	// or host:port; 0.0.0.0:port or [::]:port admits any IP address on that
	// port. Requests with another Host are refused, and changes from a page
	// of another origin. Required.
	Hosts []string
	// Logger gets one line per change and per failed snapshot. Default:
	// discard.
	Logger *slog.Logger
}

// Dashboard is the web dashboard's HTTP handler.
type Dashboard struct {
	cfg   Config
	hosts []allowedHost
	csrf  string
	page  *template.Template
	mux   *http.ServeMux

	tasks    cached[[]stream.TaskInfo]
	outcomes cached[[]stream.OutcomeRecord]
	dead     cached[[]stream.DeadLetter]
	server   cached[stream.ServerInfo]
	workers  cached[[]stream.WorkerInfo]
	history  map[string]*cached[[]stream.HistoryPoint] // by span: historySpans
}

// New returns the dashboard's handler.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Client == nil {
		return nil, errors.New("dashboard: no client")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hosts, err := parseHosts(cfg.Hosts)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	page, err := template.ParseFS(static, "static/index.html")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: cfg, hosts: hosts, csrf: base64.RawURLEncoding.EncodeToString(b), page: page, mux: http.NewServeMux(),
		history: map[string]*cached[[]stream.HistoryPoint]{}}
	for _, s := range historySpans {
		d.history[s.name] = &cached[[]stream.HistoryPoint]{}
	}
	assets, _ := fs.Sub(static, "static")
	d.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(assets)))
	d.mux.HandleFunc("GET /{$}", d.index)
	d.mux.HandleFunc("GET /api/snapshot", d.snapshotJSON)
	d.mux.HandleFunc("GET /api/events", d.events)
	d.mux.HandleFunc("GET /api/task", d.task)
	d.mux.HandleFunc("GET /api/tasks", d.taskList)
	d.mux.HandleFunc("GET /api/outcomes", d.outcomeList)
	d.mux.HandleFunc("GET /api/dead", d.deadList)
	d.mux.HandleFunc("GET /api/servers", d.serverList)
	d.mux.HandleFunc("GET /api/history", d.historyJSON)
	d.mux.HandleFunc("POST /api/signin", d.change(d.signin))
	d.mux.HandleFunc("POST /api/replay", d.change(d.replay))
	d.mux.HandleFunc("POST /api/delete", d.change(d.deleteDead))
	d.mux.HandleFunc("POST /api/replay-all", d.change(d.replayAll))
	d.mux.HandleFunc("POST /api/purge", d.change(d.purge))
	d.mux.HandleFunc("POST /api/cancel", d.change(d.cancel))
	d.mux.HandleFunc("POST /api/lane", d.change(d.lane))
	return d, nil
}

// ServeHTTP serves the page and its API.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	// Before anything else, the token's entry included: a page of a name
	// that resolves here by its owner's say (DNS rebinding) is same-origin
	// to the browser, so only the Host tells it apart.
	if !d.hostAllowed(r.Host) {
		http.Error(w, "this dashboard does not serve the host "+strconv.Quote(r.Host)+": open it by its own address, or start it with --allowed-host for that name",
			http.StatusMisdirectedRequest)
		return
	}
	if d.cfg.Token != "" && !d.tokenOK(w, r) {
		http.Error(w, "this dashboard needs its token: open it with ?token=…", http.StatusUnauthorized)
		return
	}
	d.mux.ServeHTTP(w, r)
}

const tokenCookie = "captchaq_dashboard"

func (d *Dashboard) tokenOK(w http.ResponseWriter, r *http.Request) bool {
	same := func(s string) bool { return subtle.ConstantTimeCompare([]byte(s), []byte(d.cfg.Token)) == 1 }
	if c, err := r.Cookie(tokenCookie); err == nil && same(c.Value) {
		return true
	}
	if same(r.URL.Query().Get("token")) {
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: d.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		return true
	}
	return false
}

// index serves the page with the first snapshot in it, so that the page
// shows the queues at once, before the first server-sent event.
func (d *Dashboard) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = d.page.Execute(w, map[string]any{"CSRF": d.csrf, "ReadOnly": d.cfg.Connect == nil, "NoUsers": !d.cfg.Client.AuthRequired(),
		"Snapshot": d.snapshot(r.Context())})
}

// Snapshot is what the page shows at one moment besides the lists (which
// it reads a page at a time): the queues, workers and solve times, and the
// last hour's history. It never holds a token (a solution) or a page URL.
type Snapshot struct {
	At      time.Time             `json:"at"`
	Stats   stream.Stats          `json:"stats"`
	History []stream.HistoryPoint `json:"history"`
	// Error says what could not be read, if anything.
	Error string `json:"error,omitempty"`
}

// historySpans are the spans the page's charts offer, each in sixty steps:
// the last hour (which every snapshot carries) a minute a step, and further
// back as far as the stream keeps events and outcomes (its retention, 24 h
// by default). A span is read at most once per quarter of its step.
var historySpans = []struct {
	name       string
	span, step time.Duration
}{
	{"1h", time.Hour, time.Minute},
	{"6h", 6 * time.Hour, 6 * time.Minute},
	{"24h", 24 * time.Hour, 24 * time.Minute},
}

func (d *Dashboard) snapshot(ctx context.Context) Snapshot {
	c := d.cfg.Client
	s := Snapshot{At: time.Now()}
	var errs []error
	var err error
	if s.Stats, err = c.Stats(ctx, time.Hour); err != nil {
		errs = append(errs, err)
	}
	if s.History, err = d.readHistory(ctx, historySpans[0].name); err != nil {
		errs = append(errs, err)
	}
	if s.History == nil {
		s.History = []stream.HistoryPoint{}
	}
	if err := errors.Join(errs...); err != nil {
		s.Error = err.Error()
		d.cfg.Logger.Warn("dashboard snapshot", slog.Any("error", err))
	}
	return s
}

func (d *Dashboard) snapshotJSON(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.snapshot(r.Context()))
}

// events streams a snapshot per refresh interval as server-sent events until
// the page goes away.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	ctx := r.Context()
	t := time.NewTicker(d.cfg.Refresh)
	defer t.Stop()
	for {
		b, err := json.Marshal(d.snapshot(ctx))
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// task answers where a task stands and its whole trace.
func (d *Dashboard) task(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if err := stream.ValidateID(id); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	ti, err := d.cfg.Client.TaskOf(r.Context(), id)
	if errors.Is(err, stream.ErrNotFound) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no task " + id + " in the stream (never submitted, or older than the retention)"})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	tr, err := d.cfg.Client.Trace(r.Context(), id)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task": ti, "trace": tr})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
