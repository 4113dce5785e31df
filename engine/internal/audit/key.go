package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow/internal/domain"
)

// KeyFile is the name of the checkpoint signing key's file in the data
// directory: an nkeys seed (a server key), readable by its owner only.
const KeyFile = "audit.nk"

// LoadKey reads the checkpoint signing key from dir, creating it if it is
// not there (created reports that).
func LoadKey(dir string) (kp nkeys.KeyPair, created bool, err error) {
	path := filepath.Join(dir, KeyFile)
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		kp, err = nkeys.CreateServer()
		if err != nil {
			return nil, false, err
		}
		seed, err = kp.Seed()
		if err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, false, err
		}
		// O_EXCL: two processes starting at once keep the first one's key.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return LoadKey(dir)
		}
		if err != nil {
			return nil, false, fmt.Errorf("audit key: %w", err)
		}
		_, werr := f.Write(append(seed, '\n'))
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return nil, false, fmt.Errorf("audit key %s: %w", path, err)
		}
		return kp, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("audit key: %w", err)
	}
	kp, err = nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, false, fmt.Errorf("audit key %s: %w", path, err)
	}
	return kp, false, nil
}

// PublicKey is the public half of kp, as verify takes it.
func PublicKey(kp nkeys.KeyPair) string {
	pub, _ := kp.PublicKey()
	return pub
}

// SignedBytes are the bytes of a checkpoint its signature is over: a
// domain tag, its range, count and root, and the previous checkpoint's
// hash (the event's Prev).
func SignedBytes(c *domain.Checkpoint, prev []byte) []byte {
	b := make([]byte, 0, 64+len(c.Root)+len(prev))
	b = append(b, "jetflow.checkpoint.v1\x00"...)
	b = binary.BigEndian.AppendUint64(b, c.From)
	b = binary.BigEndian.AppendUint64(b, c.UpTo)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Count))
	b = append(b, byte(len(c.Root)))
	b = append(b, c.Root...)
	b = append(b, byte(len(prev)))
	b = append(b, prev...)
	return b
}

// Sign signs c (with its Prev) by kp, setting its Key and Sig.
func Sign(kp nkeys.KeyPair, c *domain.Checkpoint, prev []byte) error {
	c.Key = PublicKey(kp)
	sig, err := kp.Sign(SignedBytes(c, prev))
	if err != nil {
		return err
	}
	c.Sig = sig
	return nil
}

// CheckSignature checks c's signature against pub (nkeys public keys,
// comma-separated: every engine's that may lead; "": the key the
// checkpoint names, which proves nothing against whoever could write it,
// and is said so by verify).
func CheckSignature(c *domain.Checkpoint, prev []byte, pub string) error {
	key := c.Key
	if pub != "" && !slices.Contains(strings.Split(pub, ","), c.Key) {
		return fmt.Errorf("signed by %s, not by the trusted key %s", c.Key, pub)
	}
	kp, err := nkeys.FromPublicKey(key)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	if err := kp.Verify(SignedBytes(c, prev), c.Sig); err != nil {
		return errors.New("bad signature")
	}
	return nil
}
