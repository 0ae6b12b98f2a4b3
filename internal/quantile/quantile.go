// Package quantile computes quantiles of samples, for the statistics the
// CLI and the queue's stats report.
package quantile

// Of returns the p-quantile (0..1) of sorted values by the nearest rank; 0
// for none.
func Of(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
