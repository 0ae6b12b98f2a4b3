// Finding the topology: the JetStream handle in a domain, and the
// stream and token stream an admin created.

package topology

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is the JetStream handle on nc for the given domain: requests
// go to $JS.<domain>.API when domain is set (a site linked to the hub as a
// leaf node), to $JS.API otherwise.
func JetStream(nc *nats.Conn, domain string, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	if domain == "" {
		return jetstream.New(nc, opts...)
	}
	return jetstream.NewWithDomain(nc, domain, opts...)
}

// OpenStream finds the stream named name, and refuses with ErrNoTopology,
// naming the domain reached, when it does not exist.
func OpenStream(ctx context.Context, js jetstream.JetStream, t Spec, name string) (jetstream.Stream, error) {
	s, err := LookupStream(ctx, js, name)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, Missing(ctx, js, t.Domain, "stream "+name)
	case t.Domain != "" && errors.Is(err, nats.ErrNoResponders):
		// The client gave a domain: nothing in it answers.
		return nil, fmt.Errorf("look up stream %s in %s: %w (no JetStream answers in it: a site's link to the hub is down, "+
			"or no server has that domain; the hub's config names it: jetstream { domain: … })", name, domainName(t.Domain), err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("look up stream %s in %s: %w (a site without JetStream of its own reaches the hub's with --js-domain and the hub's domain)", name, domainName(t.Domain), err)
	case t.Domain == "" && errors.Is(err, context.DeadlineExceeded):
		// A producer at a site with JetStream of its own gets no answer
		// at all without a domain: its account has none, and nats-server
		// does not answer for an account with a leaf node link.
		return nil, fmt.Errorf("look up stream %s in %s: %w (at a site, give the hub's domain: --js-domain)", name, domainName(t.Domain), err)
	}
	return nil, fmt.Errorf("look up stream %s in %s: %w", name, domainName(t.Domain), err)
}

// Missing is the refusal of a client that found no what in domain: it
// names the JetStream domain it reached and says who creates the topology.
func Missing(ctx context.Context, js jetstream.JetStream, domain, what string) error {
	reached := domainName(domain)
	if domain == "" {
		// Bounded: a role without the right to ask (producers, workers) is
		// refused only asynchronously, as no answer.
		actx, cancel := context.WithTimeout(ctx, LookupTimeout)
		defer cancel()
		if info, err := js.AccountInfo(actx); err == nil && info.Domain != "" {
			reached = domainName(info.Domain)
		}
	}
	return fmt.Errorf("%w: %s not found in %s; an admin creates it there (`captchaq init`, or `captchaq server`), "+
		"or point this client at the hub's domain (--js-domain)", ErrNoTopology, what, reached)
}

// domainName says which JetStream domain d is, for messages.
func domainName(d string) string {
	if d == "" {
		return "the JetStream reached without a domain"
	}
	return fmt.Sprintf("JetStream domain %q", d)
}

// Open finds the stream and the token stream that an admin created
// (Ensure), and creates nothing.
func Open(ctx context.Context, js jetstream.JetStream, t Spec) (s, tokens jetstream.Stream, err error) {
	if s, err = OpenStream(ctx, js, t, t.Stream); err != nil {
		return nil, nil, err
	}
	if tokens, err = OpenStream(ctx, js, t, TokenStreamName(t.Stream)); err != nil {
		return nil, nil, err
	}
	return s, tokens, nil
}

// ErrNoTopology is the error of a producer, worker or reader that finds no
// topology where it looked (stream.ErrNoTopology).
var ErrNoTopology = errors.New("no captchaq topology")
