package commands

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeMsgpack implements msgpack.CustomDecoder: a submit request decodes
// as its fields say (strictly, if the decoder disallows unknown fields),
// with run_at taken as a msgpack timestamp or, as in JSON, an RFC 3339
// string.
func (r *SubmitRequest) DecodeMsgpack(dec *msgpack.Decoder) error {
	type plain SubmitRequest // its fields, without this method
	var w struct {
		// Declared before the embedded fields, it shadows theirs.
		RunAt *wireTime `msgpack:"run_at,omitempty"`
		plain `msgpack:",inline"`
	}
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*r = SubmitRequest(w.plain)
	if w.RunAt != nil {
		t := time.Time(*w.RunAt)
		r.RunAt = &t
	}
	return nil
}

// wireTime is a time in msgpack: a timestamp, or an RFC 3339 string.
type wireTime time.Time

// DecodeMsgpack implements msgpack.CustomDecoder.
func (t *wireTime) DecodeMsgpack(dec *msgpack.Decoder) error {
	v, err := dec.DecodeInterface()
	if err != nil {
		return err
	}
	switch x := v.(type) {
	case time.Time:
		*t = wireTime(x)
		return nil
	case string:
		p, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return fmt.Errorf("time %q: want RFC 3339 (2030-01-01T00:00:00Z): %v", x, err)
		}
		*t = wireTime(p)
		return nil
	}
	return fmt.Errorf("time: want a msgpack timestamp or an RFC 3339 string, got %T", v)
}

// CheckGivenNamespace refuses a submit body that gives its namespace as an
// empty string: a namespace left out (or null) is the default one, one
// that is given is taken as it is, and "" is no namespace
// (errInvalidNamespace). The request it decodes into cannot tell the two
// apart, so the body is asked.
func CheckGivenNamespace(body []byte, asJSON bool) error {
	var given struct {
		Namespace *string `json:"namespace" msgpack:"namespace"`
	}
	var err error
	if asJSON {
		err = json.Unmarshal(body, &given)
	} else {
		err = msgpack.Unmarshal(body, &given)
	}
	if err != nil || given.Namespace == nil || *given.Namespace != "" {
		return nil // a body that does not decode is refused by its decoder
	}
	return CheckNamespace("")
}
