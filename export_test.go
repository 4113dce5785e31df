package jetflow

// SetStartedHook sets the hook the queue watch calls once it started a new
// queue's runtime, before the worker registers it, until cleanup.
func SetStartedHook(cleanup func(func()), f func(queue string)) {
	startedHook.Store(&f)
	cleanup(func() { startedHook.Store(nil) })
}
