package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// FanOut is what a coordinator handler returns, as its error, to defer its
// outcome to pieces (store.FanOut: children or batches).
type FanOut = store.FanOut

// fanOut creates the pieces of a coordinator's attempt
// (Store.MakePieces); a fan-out that can never be made (a bad plan, child
// or payload) fails the attempt for good.
func (r *Runtime) fanOut(ctx context.Context, rn *run, f *FanOut) (domain.FanoutPlan, error) {
	plan, err := r.store.MakePieces(ctx, rn.snap.Job, f)
	if errors.Is(err, commands.ErrInvalidInput) {
		return plan, &PermanentError{Err: fmt.Errorf("fan-out: %w", err)}
	}
	return plan, err
}
