package commands

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// A step on the wire is one object: its own fields (name, depends_on,
// on_failure) next to those of its job (type, payload, queue, ... as in a
// submit). Its job is decoded strictly: a field that neither has is
// refused.

// stepFields are the fields of a step that are not its job's.
type stepFields struct {
	Name      string   `json:"name" msgpack:"name"`
	DependsOn []string `json:"depends_on,omitempty" msgpack:"depends_on,omitempty"`
	OnFailure string   `json:"on_failure,omitempty" msgpack:"on_failure,omitempty"`
}

var stepKeys = map[string]bool{"name": true, "depends_on": true, "on_failure": true}

// stepErr says which step a decoding error is about.
func stepErr(name string, err error) error {
	if name == "" {
		return fmt.Errorf("step: %w", err)
	}
	return fmt.Errorf("step %q: %w", name, err)
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *WorkflowStepRequest) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("step: want an object, not null")
	}
	own, rest := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range m {
		if stepKeys[k] {
			own[k] = v
		} else {
			rest[k] = v
		}
	}
	var f stepFields
	ob, _ := json.Marshal(own)
	if err := json.Unmarshal(ob, &f); err != nil {
		return stepErr("", err)
	}
	rb, _ := json.Marshal(rest)
	dec := json.NewDecoder(bytes.NewReader(rb))
	dec.DisallowUnknownFields()
	var job SubmitRequest
	if err := dec.Decode(&job); err != nil {
		return stepErr(f.Name, err)
	}
	*s = WorkflowStepRequest{Name: f.Name, DependsOn: f.DependsOn, OnFailure: f.OnFailure, Job: job}
	return nil
}

// MarshalJSON implements json.Marshaler: the step's fields and its job's in
// one object.
func (s WorkflowStepRequest) MarshalJSON() ([]byte, error) {
	jb, err := json.Marshal(&s.Job)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(jb, &m); err != nil {
		return nil, err
	}
	fb, _ := json.Marshal(stepFields{Name: s.Name, DependsOn: s.DependsOn, OnFailure: s.OnFailure})
	var f map[string]json.RawMessage
	_ = json.Unmarshal(fb, &f)
	for k, v := range f {
		m[k] = v
	}
	return json.Marshal(m)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (s *WorkflowStepRequest) DecodeMsgpack(dec *msgpack.Decoder) error {
	var m map[string]msgpack.RawMessage
	if err := dec.Decode(&m); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("step: want a map, not nil")
	}
	own, rest := map[string]msgpack.RawMessage{}, map[string]msgpack.RawMessage{}
	for k, v := range m {
		if stepKeys[k] {
			own[k] = v
		} else {
			rest[k] = v
		}
	}
	var f stepFields
	ob, err := msgpack.Marshal(own)
	if err != nil {
		return stepErr("", err)
	}
	if err := msgpack.Unmarshal(ob, &f); err != nil {
		return stepErr("", err)
	}
	rb, err := msgpack.Marshal(rest)
	if err != nil {
		return stepErr(f.Name, err)
	}
	d := msgpack.NewDecoder(bytes.NewReader(rb))
	d.DisallowUnknownFields(true)
	var job SubmitRequest
	if err := d.Decode(&job); err != nil {
		return stepErr(f.Name, err)
	}
	*s = WorkflowStepRequest{Name: f.Name, DependsOn: f.DependsOn, OnFailure: f.OnFailure, Job: job}
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder: the step's fields and its
// job's in one map.
func (s WorkflowStepRequest) EncodeMsgpack(enc *msgpack.Encoder) error {
	jb, err := msgpack.Marshal(&s.Job)
	if err != nil {
		return err
	}
	var m map[string]msgpack.RawMessage
	if err := msgpack.Unmarshal(jb, &m); err != nil {
		return err
	}
	fb, err := msgpack.Marshal(stepFields{Name: s.Name, DependsOn: s.DependsOn, OnFailure: s.OnFailure})
	if err != nil {
		return err
	}
	var f map[string]msgpack.RawMessage
	if err := msgpack.Unmarshal(fb, &f); err != nil {
		return err
	}
	for k, v := range f {
		m[k] = v
	}
	return enc.Encode(m)
}
