package metrics

import "github.com/captchaq/captchaq/solver"

// SolverCall counts one call to the solving service as the solver reports it
// (solver.Config.OnCall): the solver's own reading of the reply, through its
// own tuned transport. A batch poll that was read counts as code BATCH: its
// reply lists several captchas' states.
func (m *Worker) SolverCall(c solver.Call) {
	code := c.Code
	if c.Batch && code == "OK" {
		code = "BATCH"
	}
	m.OnCall(c.Op, code, c.Duration)
}
