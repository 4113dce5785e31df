package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// ResultName is the name of a job's result archive among its files.
const ResultName = "out/result.zip"

// ErrNoFile: the job has no such file (no input of that name, or no result
// archive yet). It matches commands.ErrNotFound.
var ErrNoFile = fmt.Errorf("no such file: %w", commands.ErrNotFound)

// Store is a job's view of the files bucket.
type Store struct {
	obs jetstream.ObjectStore
	js  jetstream.JetStream // reads of an object by offset (ranged.go)
}

// Open opens the files bucket, provisioning it if it is missing.
func Open(ctx context.Context, js jetstream.JetStream, topo streams.Topology) (*Store, error) {
	obs, err := js.ObjectStore(ctx, streams.FilesBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if err = streams.EnsureObjectStore(ctx, js, topo.FilesConfig()); err == nil {
			obs, err = js.ObjectStore(ctx, streams.FilesBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("files bucket: %w", err)
	}
	return &Store{obs: obs, js: js}, nil
}

// ResultJSONName is the name, among a job's files, of a result of its
// attempt n too large for the record (commands.MaxInlineResult), sum the
// first 16 hex digits of its SHA-256: one object per attempt and content,
// so that neither an attempt that lost its lease nor a second report of the
// same attempt can replace the result an event names.
func ResultJSONName(attempt int, sum string) string {
	return fmt.Sprintf("out/result-%d-%s.json", attempt, sum)
}

var resultJSONName = regexp.MustCompile(`^out/result-[0-9]+-[0-9a-f]{16}\.json$`)

// InputKey is the object of a job's input file.
func InputKey(jobID, name string) string { return jobID + "/in/" + name }

// ResultKey is the object of a job's result archive.
func ResultKey(jobID string) string { return jobID + "/" + ResultName }

func ref(name string, info *jetstream.ObjectInfo) domain.FileRef {
	return domain.FileRef{Name: name, Size: int64(info.Size), Digest: info.Digest}
}

// PutInput stores an input file of a job from r, streaming it in chunks.
// The name must pass commands.CheckFileName. A read error (a limit, a
// broken upload) leaves no object.
func (s *Store) PutInput(ctx context.Context, jobID, name string, r io.Reader) (domain.FileRef, error) {
	if err := commands.CheckFileName(name); err != nil {
		return domain.FileRef{}, err
	}
	info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: InputKey(jobID, name)}, r)
	if err != nil {
		return domain.FileRef{}, fmt.Errorf("store %s of job %s: %w", name, jobID, err)
	}
	return ref(name, info), nil
}

// DeleteInputs deletes input files of a job (those of a submit that was
// refused); a file that is not there is no error.
func (s *Store) DeleteInputs(ctx context.Context, jobID string, names []string) error {
	var errs []error
	for _, n := range names {
		if err := s.obs.Delete(ctx, InputKey(jobID, n)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Input opens an input file of a job; its digest must be the one the
// job's spec recorded, else the file was replaced and is refused.
func (s *Store) Input(ctx context.Context, jobID string, f domain.FileRef) (jetstream.ObjectResult, error) {
	if err := commands.CheckFileName(f.Name); err != nil {
		return nil, err
	}
	res, err := s.obs.Get(ctx, InputKey(jobID, f.Name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("input %s of job %s: %w", f.Name, jobID, ErrNoFile)
	}
	if err != nil {
		return nil, fmt.Errorf("input %s of job %s: %w", f.Name, jobID, err)
	}
	info, err := res.Info()
	if err != nil {
		_ = res.Close()
		return nil, fmt.Errorf("input %s of job %s: %w", f.Name, jobID, err)
	}
	if f.Digest != "" && info.Digest != f.Digest {
		_ = res.Close()
		return nil, fmt.Errorf("input %s of job %s: its digest %s is not the %s the job was submitted with",
			f.Name, jobID, info.Digest, f.Digest)
	}
	return res, nil
}

// PutResult stores a job's result archive, replacing an earlier attempt's.
func (s *Store) PutResult(ctx context.Context, jobID string, r io.Reader) (domain.FileRef, error) {
	info, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: ResultKey(jobID)}, r)
	if err != nil {
		return domain.FileRef{}, fmt.Errorf("store the result of job %s: %w", jobID, err)
	}
	return ref(ResultName, info), nil
}

// PutResultJSON stores the JSON result of a job's attempt (ResultJSONName),
// for the event that records the attempt's success to name.
func (s *Store) PutResultJSON(ctx context.Context, jobID string, attempt int, result []byte) (domain.FileRef, error) {
	sum := sha256.Sum256(result)
	name := ResultJSONName(attempt, hex.EncodeToString(sum[:8]))
	info, err := s.obs.PutBytes(ctx, jobID+"/"+name, result)
	if err != nil {
		return domain.FileRef{}, fmt.Errorf("store the result of job %s: %w", jobID, err)
	}
	return ref(name, info), nil
}

// OpenResultJSON opens the result a job's event names (domain.Job.ResultRef),
// refused unless it still has the size and digest the event recorded.
func (s *Store) OpenResultJSON(ctx context.Context, jobID string, f domain.FileRef) (jetstream.ObjectResult, error) {
	if !validResultJSONName(f.Name) {
		return nil, fmt.Errorf("result of job %s: %q is not a result's name", jobID, f.Name)
	}
	res, err := s.obs.Get(ctx, jobID+"/"+f.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("result of job %s (%s): %w", jobID, f.Name, ErrNoFile)
	}
	if err != nil {
		return nil, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	info, err := res.Info()
	if err == nil && (info.Digest != f.Digest || int64(info.Size) != f.Size) {
		err = fmt.Errorf("%s (%d bytes) is not the %s (%d bytes) its event recorded", info.Digest, info.Size, f.Digest, f.Size)
	}
	if err != nil {
		_ = res.Close()
		return nil, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	return res, nil
}

// ResultJSON reads the result a job's event names whole (OpenResultJSON);
// it is at most commands.MaxResultBytes.
func (s *Store) ResultJSON(ctx context.Context, jobID string, f domain.FileRef) ([]byte, error) {
	if f.Size > commands.MaxResultBytes {
		return nil, fmt.Errorf("result of job %s: %d bytes, more than a result may have", jobID, f.Size)
	}
	res, err := s.OpenResultJSON(ctx, jobID, f)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	b := make([]byte, f.Size)
	if _, err := io.ReadFull(res, b); err != nil {
		return nil, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	return b, nil
}

func validResultJSONName(name string) bool { return resultJSONName.MatchString(name) }

// ResultInfo describes a job's result archive; ErrNoFile if it has none.
func (s *Store) ResultInfo(ctx context.Context, jobID string) (domain.FileRef, error) {
	info, err := s.obs.GetInfo(ctx, ResultKey(jobID))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return domain.FileRef{}, fmt.Errorf("result of job %s: %w", jobID, ErrNoFile)
	}
	if err != nil {
		return domain.FileRef{}, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	return ref(ResultName, info), nil
}

// Result opens a job's result archive; ErrNoFile if it has none.
func (s *Store) Result(ctx context.Context, jobID string) (jetstream.ObjectResult, error) {
	res, err := s.obs.Get(ctx, ResultKey(jobID))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("result of job %s: %w", jobID, ErrNoFile)
	}
	if err != nil {
		return nil, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	return res, nil
}

// Sweep deletes the files of jobs that do not exist: a submit whose files
// were stored and which then crashed, or was refused and could not clean
// up. A job's files are only looked at once the newest of them is older
// than grace, so that an upload in progress is not swept. exists reports
// whether a job exists (an error skips the job). It returns how many
// objects it deleted.
func (s *Store) Sweep(ctx context.Context, grace time.Duration, exists func(ctx context.Context, jobID string) (bool, error)) (int, error) {
	list, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list files: %w", err)
	}
	newest := map[string]time.Time{}
	byJob := map[string][]string{}
	for _, o := range list {
		id, _, ok := strings.Cut(o.Name, "/")
		if !ok || o.Deleted {
			continue
		}
		byJob[id] = append(byJob[id], o.Name)
		if o.ModTime.After(newest[id]) {
			newest[id] = o.ModTime
		}
	}
	deleted := 0
	for id, names := range byJob {
		if time.Since(newest[id]) < grace {
			continue
		}
		ok, err := false, error(nil)
		if !ValidUpload(id) { // an upload's chunks belong to no job: swept after the grace
			ok, err = exists(ctx, id)
		}
		if err != nil || ok {
			continue
		}
		for _, n := range names {
			// Stored again since the listing (a resubmit with the same
			// idempotency key, whose job is not submitted yet): kept.
			if info, err := s.obs.GetInfo(ctx, n); err != nil || time.Since(info.ModTime) < grace {
				continue
			}
			if err := s.obs.Delete(ctx, n); err == nil {
				deleted++
			} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
				return deleted, fmt.Errorf("delete %s: %w", n, err)
			}
		}
	}
	return deleted, ctx.Err()
}

// DeleteJob deletes a job's files: the inputs its spec names, its result
// archive and its result kept as a file, if any (retention's purge). A file
// that is not there is no error; what an attempt stored and never recorded
// is the Sweep's, once the job is gone. It returns how many objects it
// deleted.
func (s *Store) DeleteJob(ctx context.Context, jobID string, inputs []string, result *domain.FileRef) (int, error) {
	n := 0
	keys := append(inputKeys(jobID, inputs), ResultKey(jobID))
	if result != nil {
		keys = append(keys, jobID+"/"+result.Name)
	}
	for _, key := range keys {
		err := s.obs.Delete(ctx, key)
		if err == nil {
			n++
		} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
			return n, fmt.Errorf("delete %s: %w", key, err)
		}
	}
	return n, nil
}

func inputKeys(jobID string, names []string) []string {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = InputKey(jobID, n)
	}
	return keys
}
