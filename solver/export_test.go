package solver

import "time"

// KnownCodes returns every code Classify knows by name, for tests.
func KnownCodes() []string { return knownCodes() }

// Observe teaches c that a captcha of kind was ready after lo and by hi
// (offsets from its submission), as an answer it polled for would.
func (c *Client) Observe(kind string, lo, hi time.Duration) { c.poller.observe(kind, lo, hi) }
