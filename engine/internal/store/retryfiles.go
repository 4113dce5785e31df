package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// retryWithFiles submits the retry req of job orig, whose spec records
// input files: they are copied under the new job's id first, then the
// retry is submitted recording them, as a submit with files is (a refusal
// deletes the copies; a crash leaves them to the FileSweeper).
func (s *Store) retryWithFiles(ctx context.Context, orig *domain.Job, req *commands.SubmitRequest) (Submitted, error) {
	fs, err := s.Files(ctx)
	if err != nil {
		return Submitted{}, err
	}
	id := domain.NewID()
	if req.IdempotencyKey != "" {
		id = domain.KeyedID(orig.Spec.Namespace, req.IdempotencyKey)
		if snap, err := s.Current(ctx, id); err == nil {
			return Submitted{Snapshot: snap}, nil
		} else if !errors.Is(err, commands.ErrNotFound) {
			return Submitted{}, err
		}
	}
	var copied []string
	drop := func(err error) (Submitted, error) {
		if derr := fs.DeleteInputs(context.WithoutCancel(ctx), id, copied); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the files of a refused retry: %w", derr))
		}
		return Submitted{}, err
	}
	for _, f := range orig.Spec.Files {
		in, err := fs.Input(ctx, orig.ID, f)
		if err != nil {
			return drop(fmt.Errorf("retry %s: %w", orig.ID, err))
		}
		copied = append(copied, f.Name)
		ref, err := fs.PutInput(ctx, id, f.Name, in)
		_ = in.Close()
		if err != nil {
			return drop(err)
		}
		req.Files = append(req.Files, ref)
	}
	req.ID = id
	res, err := s.Submit(ctx, req)
	if err != nil {
		return drop(err)
	}
	return res, nil
}
