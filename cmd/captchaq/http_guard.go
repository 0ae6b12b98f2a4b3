package main

import (
	"log/slog"
	"net"
	"sync"

	"github.com/captchaq/captchaq/internal/httpguard"
)

var (
	budgetOnce sync.Once
	budget     *httpguard.Budget
)

// guardListener bounds listener l (name: gateway, dashboard, metrics) by
// lim, its MaxConns lowered to fit the process's descriptor budget. The
// first call raises the descriptor limit to its hard limit and logs it.
func guardListener(l net.Listener, name string, lim httpguard.Limits, log *slog.Logger) (net.Listener, httpguard.Limits) {
	budgetOnce.Do(func() {
		soft, hard, err := httpguard.RaiseNoFile()
		if err != nil {
			log.Warn("descriptor limit unknown: HTTP connections keep their own bounds", slog.Any("error", err))
			budget = httpguard.NewBudget(1 << 40)
			return
		}
		log.Info("descriptor limit", slog.Uint64("soft", soft), slog.Uint64("hard", hard))
		budget = httpguard.NewBudget(soft)
	})
	budget.Take(name, &lim, log)
	return httpguard.Listen(l, lim), lim
}
