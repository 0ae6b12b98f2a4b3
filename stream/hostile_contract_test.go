package stream_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/streamtest"
)

// Task messages a producer with only a NATS client can publish that say
// something the wire contract does not allow: each ends dead, invalid-task,
// with a detail naming what is wrong, and none reaches the service; a
// well-formed task published beside them is solved, the one captcha paid.
func TestContractHostileTaskMessagesRefusedUnpaid(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)
	const turnstile = `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"}}`
	const recaptcha = `{"method":"userrecaptcha","params":{"googlekey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-","pageurl":"https://shop.example/"}}`
	cases := []struct {
		id, subject, body string
		headers           map[string]string
		code              string // the outcome's error
		detail            string // what its detail names
	}{
		{id: "h-submitby", subject: "fast.normal", body: turnstile, headers: map[string]string{"Captchaq-Submit-By": "tomorrow"},
			code: "INVALID_TASK", detail: "Captchaq-Submit-By"},
		{id: "h-gen", subject: "fast.normal", body: turnstile, headers: map[string]string{"Captchaq-Gen": "1"},
			code: "INVALID_ENVELOPE", detail: "Captchaq-Gen"},
		{id: "h-submitted", subject: "fast.normal", body: turnstile, headers: map[string]string{"Captchaq-Submitted": time.Now().UTC().Format(time.RFC3339Nano)},
			code: "INVALID_ENVELOPE", detail: "Captchaq-Submitted"},
		{id: "h-param", subject: "fast.normal", body: `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/","colour":"red"}}`,
			code: "INVALID_TASK", detail: "params.colour"},
		{id: "h-param-typo", subject: "fast.normal", body: `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/","pageUrl":"x"}}`,
			code: "INVALID_TASK", detail: `params.pageUrl: not a parameter of method turnstile (did you mean "pageurl"?)`},
		{id: "h-priority", subject: "fast.normal", body: `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"},"priority":"high"}`,
			code: "INVALID_TASK", detail: "priority"},
		{id: "h-fast-on-slow", subject: "slow.normal", body: turnstile, code: "INVALID_TASK", detail: "lane"},
		{id: "h-slow-on-fast", subject: "fast.high", body: recaptcha, code: "INVALID_TASK", detail: "lane"},
	}
	gens := map[string]uint64{}
	for _, c := range cases {
		msg := nats.NewMsg("captcha.tasks." + c.subject + "." + c.id)
		msg.Header.Set("Nats-Msg-Id", c.id)
		for k, v := range c.headers {
			msg.Header.Set(k, v)
		}
		msg.Data = []byte(c.body)
		ack, err := p.js.PublishMsg(ctx, msg)
		require.NoError(t, err, c.id)
		gens[c.id] = ack.Sequence
	}
	valid := p.publish(t, ctx, "slow", "normal", "h-valid", []byte(recaptcha))
	for _, c := range cases {
		_, out := p.outcome(t, ctx, c.id, gens[c.id])
		assert.Equal(t, "dead", out["status"], "%s: %v", c.id, out)
		assert.Equal(t, "invalid-task", out["reason"], "%s: %v", c.id, out)
		assert.Equal(t, c.code, out["error"], "%s: %v", c.id, out)
		assert.Contains(t, out["detail"], c.detail, c.id)
		assert.EqualValues(t, 0, out["attempts"], c.id)
	}
	_, out := p.outcome(t, ctx, "h-valid", valid.Sequence)
	require.Equal(t, "solved", out["status"], "%v", out)
	require.Equal(t, 1, env.Emulator.Stats().Submitted, "only the well-formed task reached the service")
}
