package dashboard

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

// changeFunc makes one change as an admin with the operator's
// credentials, and says what it did.
type changeFunc func(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error)

// errBadRequest marks a change request that is wrong in itself.
var errBadRequest = errors.New("bad request")

// change guards a change: same origin, this dashboard's CSRF token, a JSON
// body, and the operator's credentials, which must carry the admin's
// permissions.
func (d *Dashboard) change(fn changeFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(code int, format string, args ...any) {
			writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
		}
		if o := r.Header.Get("Origin"); o != "" && !d.originAllowed(o) {
			fail(http.StatusForbidden, "request from another site (Origin %s)", o)
			return
		}
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			fail(http.StatusForbidden, "request from another site")
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Captchaq-CSRF")), []byte(d.csrf)) != 1 {
			fail(http.StatusForbidden, "missing or stale page token: reload the dashboard")
			return
		}
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			fail(http.StatusUnsupportedMediaType, "want a JSON body")
			return
		}
		if d.cfg.Connect == nil {
			fail(http.StatusForbidden, "this dashboard is read-only")
			return
		}
		user, password, ok := r.BasicAuth()
		if !ok || user == "" {
			fail(http.StatusUnauthorized, "sign in with the admin's NATS user and password to change anything")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			fail(http.StatusBadRequest, "read the request: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		nc, err := d.cfg.Connect(ctx, user, password)
		if err != nil {
			fail(http.StatusUnauthorized, "NATS refused user %q: %v", user, err)
			return
		}
		defer nc.Close()
		a, err := stream.NewAdmin(nc, stream.AdminConfig{Name: "captchaq-dashboard-" + user, Topology: stream.Topology{Domain: d.cfg.Client.Domain()}})
		if err != nil {
			fail(http.StatusBadGateway, "%v", err)
			return
		}
		if err := a.CheckPermissions(ctx); err != nil {
			fail(http.StatusForbidden, "user %q may not change anything here: replay, purge, cancel and pause need the admin's permissions (%v)", user, err)
			return
		}
		msg, err := fn(ctx, a, body)
		d.changed()
		switch {
		case errors.Is(err, errBadRequest):
			fail(http.StatusBadRequest, "%v", err)
		case err != nil:
			d.cfg.Logger.Warn("dashboard change failed", slog.String("user", user), slog.String("path", r.URL.Path), slog.Any("error", err))
			fail(http.StatusConflict, "%v", err)
		default:
			d.cfg.Logger.Info("dashboard change", slog.String("user", user), slog.String("path", r.URL.Path), slog.String("done", msg))
			writeJSON(w, http.StatusOK, map[string]string{"ok": msg})
		}
	}
}

func decode[T any](body json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return v, nil
}

func (d *Dashboard) replay(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error) {
	req, err := decode[struct{ ID string }](body)
	if err != nil {
		return "", err
	}
	if err := stream.ValidateID(req.ID); err != nil {
		return "", fmt.Errorf("%w: %v", errBadRequest, err)
	}
	dl, err := a.DeadLetterOf(ctx, req.ID)
	if err != nil {
		return "", err
	}
	if dl.Reason == retry.ReasonCanceled {
		return "", fmt.Errorf("%w: task %s was canceled: submit it anew if it is wanted after all", errBadRequest, req.ID)
	}
	r, err := a.Replay(ctx, req.ID)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("task %s is queued again (task message %d)", r.ID, r.Seq), nil
}

func (d *Dashboard) cancel(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error) {
	req, err := decode[struct{ ID string }](body)
	if err != nil {
		return "", err
	}
	t, err := a.Cancel(ctx, req.ID, "dashboard")
	if err != nil {
		return "", err
	}
	if t.Status == stream.TaskSolving {
		return fmt.Sprintf("task %s canceled; its attempt already at the service still finishes", req.ID), nil
	}
	return fmt.Sprintf("task %s canceled: it ends dead/canceled without a call to the service", req.ID), nil
}

func (d *Dashboard) lane(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error) {
	req, err := decode[struct{ Lane, Action string }](body)
	if err != nil {
		return "", err
	}
	lane := stream.Lane(req.Lane)
	switch req.Action {
	case "pause":
		if err := a.PauseLane(ctx, lane, time.Now().Add(100*365*24*time.Hour)); err != nil {
			return "", err
		}
		return "lane " + req.Lane + " paused", nil
	case "resume":
		if err := a.ResumeLane(ctx, lane); err != nil {
			return "", err
		}
		return "lane " + req.Lane + " resumed", nil
	}
	return "", fmt.Errorf("%w: action %q: want pause or resume", errBadRequest, req.Action)
}

func (d *Dashboard) signin(_ context.Context, _ *stream.Admin, _ json.RawMessage) (string, error) {
	if !d.cfg.Client.AuthRequired() {
		return noUsers, nil
	}
	return "signed in: the admin's permissions are checked", nil
}

// noUsers is what the page and a sign-in say on a server without users.
const noUsers = "this NATS server has no users (a local trial): any name signs in with every permission, no password is checked; " +
	"start the server with a nats.conf that has users to keep changes to the admin"

func (d *Dashboard) deleteDead(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error) {
	req, err := decode[struct{ Seq uint64 }](body)
	if err != nil {
		return "", err
	}
	if req.Seq == 0 {
		return "", fmt.Errorf("%w: want the dead letter's seq", errBadRequest)
	}
	var id string
	n, err := a.PurgeWhere(ctx, func(x stream.DeadLetter) bool {
		if x.Seq == req.Seq {
			id = x.ID
			return true
		}
		return false
	})
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("no dead letter %d (deleted already?)", req.Seq)
	}
	return fmt.Sprintf("deleted dead letter %d of task %s", req.Seq, id), nil
}

// bulkFilter reads a bulk change's filter; it must name the newest letter
// the operator saw (upto), so letters that died since are left alone.
func bulkFilter(body json.RawMessage) (filter, error) {
	q, err := decode[query](body)
	if err != nil {
		return filter{}, err
	}
	if q.Upto == 0 {
		return filter{}, fmt.Errorf("%w: want upto, the newest dead letter the confirmation covered", errBadRequest)
	}
	q.Offset, q.Limit = "", ""
	return q.parse(time.Now())
}

func (d *Dashboard) replayAll(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error) {
	f, err := bulkFilter(body)
	if err != nil {
		return "", err
	}
	rs, err := a.ReplayWhere(ctx, func(x stream.DeadLetter) bool { return replayable(x) && f.deadLetter(x) })
	if err != nil {
		return "", fmt.Errorf("replayed %d task(s), then: %w", len(rs), err)
	}
	return fmt.Sprintf("replayed %d task(s)", len(rs)), nil
}

func (d *Dashboard) purge(ctx context.Context, a *stream.Admin, body json.RawMessage) (string, error) {
	f, err := bulkFilter(body)
	if err != nil {
		return "", err
	}
	n, err := a.PurgeWhere(ctx, f.deadLetter)
	if err != nil {
		return "", fmt.Errorf("purged %d dead letter(s), then: %w", n, err)
	}
	return fmt.Sprintf("purged %d dead letter(s)", n), nil
}
