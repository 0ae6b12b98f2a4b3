package provider

import (
	"context"
	"log/slog"
	"time"
)

// The captcha ids a Set's Solves poll: claimed within the Set (member.claim)
// and across the pool's workers (Claims), so that a provider answering one
// task's submission with another's captcha id is caught, not paid twice.

// Claims is a pool-wide record of the captcha ids its workers poll, per
// provider (stream.Claims).
type Claims interface {
	// Claim claims provider's captcha id: false when another holds it;
	// an error when the record could not be asked.
	Claim(ctx context.Context, provider, id string) (bool, error)
	// Release ends the claim.
	Release(ctx context.Context, provider, id string) error
	// Contest, by a worker whose Claim failed and whose submission was
	// sent at sent, marks the claim contested unless it was made before
	// sent; Contested reports whether it is.
	Contest(ctx context.Context, provider, id string, sent time.Time) error
	Contested(ctx context.Context, provider, id string) (bool, error)
}

// ShareClaims makes c the Set's pool-wide record of the captcha ids its
// workers poll (Config.Claims): the worker calls it once connected,
// before it takes tasks.
func (s *Set) ShareClaims(c Claims) { s.claims.Store(&c) }

// claimTimeout bounds a claim's round trip to the pool's record: the
// claim holds up the polling of the captcha it is asked for.
const claimTimeout = 5 * time.Second

// askClaims calls ask with the pool's record of claims, if the Set has
// one, within claimTimeout; an error is logged with what it means (warn)
// and returned. False when the Set has no record.
func (s *Set) askClaims(ctx context.Context, name, id, warn string, ask func(context.Context, Claims) error) (bool, error) {
	c := s.claims.Load()
	if c == nil {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	err := ask(cctx, *c)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, warn, slog.String("provider", name), slog.String("captcha_id", id), slog.Any("error", err))
	}
	return true, err
}

// poolClaim claims provider name's captcha id in the pool's record, if
// the Set has one: false when another worker polls it. A record that
// cannot be asked lets the captcha be polled (a warning said so): a
// reused id is a broken provider's rare fault, and refusing every
// captcha while the broker hiccups would pay each task again.
func (s *Set) poolClaim(ctx context.Context, name, id string) bool {
	ok := false
	kept, err := s.askClaims(ctx, name, id, "the pool's record of captcha claims could not be asked: polling the captcha unchecked",
		func(ctx context.Context, c Claims) (err error) { ok, err = c.Claim(ctx, name, id); return err })
	return !kept || err != nil || ok
}

// poolContest tells the pool's record that provider name's captcha id,
// which another worker holds, was given to a submission of this one sent
// at sent (Claims.Contest).
func (s *Set) poolContest(ctx context.Context, name, id string, sent time.Time) {
	_, _ = s.askClaims(ctx, name, id, "a captcha claim could not be contested: its holder takes its answer",
		func(ctx context.Context, c Claims) error { return c.Contest(ctx, name, id, sent) })
}

// poolContested reports whether another worker contested this one's
// claim on provider name's captcha id: the captcha may be the other's
// task's, and so its answer. A record that cannot be asked says no (a
// warning says so), as a claim that cannot be made lets the captcha be
// polled.
func (s *Set) poolContested(ctx context.Context, name, id string) bool {
	contested := false
	_, _ = s.askClaims(ctx, name, id, "the pool's record of captcha claims could not be asked: the answer taken unchecked",
		func(ctx context.Context, c Claims) (err error) {
			contested, err = c.Contested(ctx, name, id)
			return err
		})
	return contested
}

// poolRelease ends the pool-wide claims on provider name's ids.
func (s *Set) poolRelease(ctx context.Context, name string, ids []string) {
	c := s.claims.Load()
	if c == nil {
		return
	}
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		if err := (*c).Release(cctx, name, id); err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "a captcha claim was not released: it expires on its own",
				slog.String("provider", name), slog.String("captcha_id", id), slog.Any("error", err))
		}
		cancel()
	}
}

// CodeReusedID is the pseudo-code of a submission a provider answered
// with the id of a captcha another task of the Set polls: a transient
// failure of the attempt, which may have been paid.
const CodeReusedID = "REUSED_CAPTCHA_ID"

// claim marks captcha id as polled by one Solve; false when another
// polls it already.
func (m *member) claim(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.polling[id] {
		return false
	}
	if m.polling == nil {
		m.polling = map[string]bool{}
	}
	m.polling[id] = true
	return true
}

// release ends the claims on ids.
func (m *member) release(ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.polling, id)
	}
}
