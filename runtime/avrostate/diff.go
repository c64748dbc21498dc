package avrostate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/hamba/avro/v2"
)

// IncompatibleError is Resolve's refusal: the checkpoint's schema (the
// writer's) cannot be read as the serde's (the reader's) by Avro's rules.
// runtime wraps it in a *state.IncompatibleSchemaError naming the
// state.
type IncompatibleError struct {
	// Blocking are the differences Avro cannot resolve; Others the ones
	// it can (a field added with a default, one renamed through an
	// alias, one removed, a number widened). Each names the field by its
	// path ("address.city") and says how it changed.
	Blocking, Others []string
	// Avro is hamba/avro's own reason.
	Avro error
}

func (e *IncompatibleError) Error() string {
	var b strings.Builder
	if len(e.Blocking) > 0 {
		fmt.Fprintf(&b, "Avro cannot resolve %s", strings.Join(e.Blocking, "; "))
	} else {
		fmt.Fprintf(&b, "Avro cannot resolve them: %v", e.Avro)
	}
	if len(e.Others) > 0 {
		fmt.Fprintf(&b, " (it could resolve the other differences: %s)", strings.Join(e.Others, "; "))
	}
	b.WriteString(". Give every new field a default; change a field's type only to one Avro promotes (int to long, float or double; long to float or double; float to double; string to bytes and back); rename a field or a record only with its old name among the new one's aliases; or give the state a new name to start it empty")
	return b.String()
}

func (e *IncompatibleError) Unwrap() error { return e.Avro }

// incompatible lists how writer and reader differ, for Resolve's error.
func incompatible(writer, reader avro.Schema, cause error) error {
	e := &IncompatibleError{Avro: cause}
	diff(writer, reader, "", map[[2]string]bool{}, e)
	return e
}

// diff adds the differences between the writer's schema w and the
// reader's r at path to e; seen holds the record pairs walked.
func diff(w, r avro.Schema, path string, seen map[[2]string]bool, e *IncompatibleError) {
	w, r = deref(w), deref(r)
	compat := avro.NewSchemaCompatibility().Compatible(r, w) == nil
	wr, wok := w.(*avro.RecordSchema)
	rr, rok := r.(*avro.RecordSchema)
	if !wok || !rok {
		if w.Type() == r.Type() && typeName(w) == typeName(r) {
			return
		}
		d := fmt.Sprintf("%s was %s and is now %s", describe(path), typeName(w), typeName(r))
		if compat {
			e.Others = append(e.Others, d)
		} else {
			e.Blocking = append(e.Blocking, d)
		}
		return
	}
	pair := [2]string{wr.FullName(), rr.FullName()}
	if seen[pair] {
		return
	}
	seen[pair] = true
	if wr.FullName() != rr.FullName() {
		d := fmt.Sprintf("record %s is now %s", wr.FullName(), rr.FullName())
		if slices.Contains(rr.Aliases(), wr.FullName()) {
			e.Others = append(e.Others, d+" (through an alias)")
		} else {
			e.Blocking = append(e.Blocking, d+" without the old name among its aliases")
		}
	}
	matched := map[string]bool{}
	for _, rf := range rr.Fields() {
		at := join(path, rf.Name())
		wf := field(wr, rf.Name())
		if wf == nil {
			for _, a := range rf.Aliases() {
				if wf = field(wr, a); wf != nil {
					e.Others = append(e.Others, fmt.Sprintf("field %q is now %q (through an alias)", join(path, wf.Name()), at))
					break
				}
			}
		}
		if wf == nil {
			if rf.HasDefault() {
				e.Others = append(e.Others, fmt.Sprintf("field %q (%s) is new, default %s", at, typeName(rf.Type()), defaultText(rf.Default())))
			} else {
				e.Blocking = append(e.Blocking, fmt.Sprintf("field %q (%s), which is new and has no default", at, typeName(rf.Type())))
			}
			continue
		}
		matched[wf.Name()] = true
		diff(wf.Type(), rf.Type(), at, seen, e)
	}
	for _, wf := range wr.Fields() {
		if !matched[wf.Name()] {
			e.Others = append(e.Others, fmt.Sprintf("field %q (%s) is gone, its data dropped", join(path, wf.Name()), typeName(wf.Type())))
		}
	}
}

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

func field(r *avro.RecordSchema, name string) *avro.Field {
	for _, f := range r.Fields() {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func describe(path string) string {
	if path == "" {
		return "the value"
	}
	return fmt.Sprintf("field %q", path)
}

// typeName names a schema briefly: a primitive by its type, a named type
// by its full name, a union by its members.
func typeName(s avro.Schema) string {
	switch t := deref(s).(type) {
	case avro.NamedSchema:
		return t.FullName()
	case *avro.ArraySchema:
		return "array of " + typeName(t.Items())
	case *avro.MapSchema:
		return "map of " + typeName(t.Values())
	case *avro.UnionSchema:
		var names []string
		for _, u := range t.Types() {
			names = append(names, typeName(u))
		}
		return "union of " + strings.Join(names, ", ")
	}
	return string(s.Type())
}

func defaultText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
