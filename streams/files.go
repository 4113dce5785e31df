package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// FilesBucket is the object store of jobs' files: a job's input files
// under "<job id>/in/<name>", its result archive under
// "<job id>/out/result.zip" (package files).
const FilesBucket = "jetflow_files"

// FilesConfig is the configuration of FilesBucket.
func (t Topology) FilesConfig() jetstream.ObjectStoreConfig {
	t = t.withDefaults()
	return jetstream.ObjectStoreConfig{
		Bucket:      FilesBucket,
		Description: "jetflow jobs' input files and result archives",
		Storage:     t.storage(),
		Replicas:    t.Replicas,
	}
}

// EnsureObjectStore creates an object store bucket if it is missing.
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) error {
	_, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateObjectStore(ctx, cfg); err == nil || errors.Is(err, jetstream.ErrBucketExists) ||
			errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("ensure object store %s: %w", cfg.Bucket, err)
	}
	return nil
}
