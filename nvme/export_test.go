package nvme

// TriggerResetSeen is triggerReset for the external tests: a reset asked
// for by a completion goroutine that read the reset count seen.
func (c *Controller) TriggerResetSeen(seen uint64, why string) { c.triggerReset(seen, why) }

// Resetting reports whether a reset triggerReset started is running.
func (c *Controller) Resetting() bool { return c.resetting.Load() }
