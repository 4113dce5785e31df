package runtime

import "time"

// SetClaimedHook sets the function process calls after each claim lands;
// it is reset when the test ends.
func SetClaimedHook(cleanup func(func()), f func(id string)) {
	claimedHook = f
	cleanup(func() { claimedHook = nil })
}

// Stopping reports whether Stop began; GraceOver whether its grace ended
// and it took the runs it cancels.
func (r *Runtime) Stopping() bool { return r.isStopping() }

func (r *Runtime) GraceOver() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.graceEnd
}

// SetConnectHook sets the function Start calls as it begins to make its
// consumers; it is reset when the test ends.
func SetConnectHook(cleanup func(func()), f func(r *Runtime)) {
	connectHook = f
	cleanup(func() { connectHook = nil })
}

// AheadAllowed is how many jobs the runtime may claim ahead of its
// handlers now.
func (r *Runtime) AheadAllowed() int {
	r.seats.mu.Lock()
	defer r.seats.mu.Unlock()
	return r.aheadAllowedAt(time.Now(), r.seats.oldestRunningLocked())
}

// SetAhead makes the runtime claim up to n jobs ahead of its handlers
// whatever its estimate says (but not lately after one found no slot in
// time).
func (r *Runtime) SetAhead(n int) { r.fixedAhead.Store(int32(n)) }
