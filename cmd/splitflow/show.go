package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splitflow/splitflow/connector/file"
	"github.com/splitflow/splitflow/connector/kafka"
	"github.com/splitflow/splitflow/runtime/checkpoint"
	"github.com/splitflow/splitflow/runtime/slotinspect"
	"github.com/splitflow/splitflow/txn"
)

// checkpoints show decodes what a checkpoint holds. The CLI cannot know a
// job's own types, so it decodes the formats splitflow's connectors write:
// an operator's state is recognised by the Go type the job fingerprint
// records for it (checkpoint.ParseSignatures) and, where the fingerprint has
// none (an older build), by trying each known decoder. Anything else is
// shown as its framing, its size and the first bytes in hex, and the output
// says which of the three happened.

// How a state was recognised, as the output says it.
const (
	bySignature = "job signature"
	byTrial     = "trial decoding"
)

type showReport struct {
	Checkpoint  int64     `json:"checkpoint"`
	Taken       time.Time `json:"taken"`
	Fingerprint string    `json:"fingerprint"`
	// Savepoint: the checkpoint is a savepoint (its metadata says so), a
	// copy a job starts from, not one of a job's own checkpoints.
	Savepoint bool       `json:"savepoint,omitempty"`
	Files     []fileView `json:"files"`
	// SharedFiles and SharedBytes count the distinct shared files the
	// checkpoint uses; OnlyHereBytes is the size of those no other
	// retained checkpoint uses.
	SharedFiles   int   `json:"shared_files,omitempty"`
	SharedBytes   int64 `json:"shared_bytes,omitempty"`
	OnlyHereBytes int64 `json:"only_here_bytes,omitempty"`
	// SharingUnknown names the retained checkpoints whose metadata could
	// not be read, so what they share is not known.
	SharingUnknown []string `json:"sharing_unknown,omitempty"`
	// Slot is set for a checkpoint of one slot of a distributed job
	// (<root>/<job>/slots/<slot>/epoch-<epoch>/chk-N).
	Slot      *slotView      `json:"slot,omitempty"`
	Operators []operatorView `json:"operators"`
}

// slotView places a slot's checkpoint in its job.
type slotView struct {
	Job   string `json:"job"`
	Slot  int    `json:"slot"`
	Epoch int64  `json:"claim_epoch"`
	// Slots is the job's slot count as its root shows it (one above the
	// highest slot with a storage there).
	Slots int `json:"slots"`
}

// fileView is one owner's state blob and the shared files it uses.
type fileView struct {
	Owner       string           `json:"owner"`
	File        string           `json:"file"`
	Bytes       int64            `json:"bytes"`
	CRC32       string           `json:"crc32c"`
	SharedFiles []sharedFileView `json:"shared_files,omitempty"`
}

type sharedFileView struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	CRC32 string `json:"crc32c"`
	// AlsoIn lists the other retained checkpoints that use the file.
	AlsoIn []int64 `json:"also_in"`
}

type operatorView struct {
	UID string `json:"uid"`
	// Signature is what the job fingerprint records for the operator.
	Signature string `json:"signature,omitempty"`
	// MaxParallelism is the max parallelism keyed state was placed by, as
	// the fingerprint records it (0: not recorded).
	MaxParallelism int `json:"max_parallelism,omitempty"`
	// Kind is "source", "keyed", "two-phase sink" or "unknown".
	Kind       string      `json:"kind"`
	Enumerator *stateView  `json:"enumerator,omitempty"`
	Subtasks   []stateView `json:"subtasks,omitempty"`
}

// stateView is one state blob: a subtask's, or the enumerator's.
type stateView struct {
	Subtask int   `json:"subtask"` // -1: the coordinator (enumerator)
	Bytes   int64 `json:"bytes"`
	// Format names the serializer and its version, e.g. "kafka split v1".
	Format string `json:"format,omitempty"`
	// RecognisedBy is "job signature" or "trial decoding"; empty when not
	// decoded.
	RecognisedBy     string            `json:"recognised_by,omitempty"`
	Splits           []splitView       `json:"splits,omitempty"`
	Enumerator       *enumView         `json:"enumerator_state,omitempty"`
	Committables     []committableView `json:"committables,omitempty"`
	WriterStateBytes int               `json:"writer_state_bytes,omitempty"`
	Keyed            *keyedView        `json:"keyed,omitempty"`
	Undecoded        *undecodedView    `json:"undecoded,omitempty"`
}

type splitView struct {
	Connector string `json:"connector"` // "kafka" or "file"
	// Slot is the slot that reads the split (enumView.OtherSlots only).
	Slot      *int   `json:"slot,omitempty"`
	ID        string `json:"id"`
	Topic     string `json:"topic,omitempty"`
	Partition *int32 `json:"partition,omitempty"`
	// Offset is where reading resumes: the next Kafka offset, or the
	// file byte offset of the next line.
	Offset int64 `json:"offset"`
	// StoppingOffset is a bounded Kafka split's end; nil when unbounded.
	StoppingOffset *int64 `json:"stopping_offset,omitempty"`
	Path           string `json:"path,omitempty"`
	Start          *int64 `json:"start,omitempty"`
	End            *int64 `json:"end,omitempty"`
}

type enumView struct {
	InitialDiscoveryDone *bool       `json:"initial_discovery_done,omitempty"`
	Assigned             []string    `json:"assigned,omitempty"`
	Pending              []splitView `json:"pending"`
	// OtherSlots, in a slot's checkpoint, are the splits the owner rule
	// gives other slots: every slot's enumerator knows all of them, and
	// only the slot's own reader asks, so these are read by their own
	// slots, not waiting here. Each has its Slot.
	OtherSlots []splitView `json:"other_slots,omitempty"`
}

type committableView struct {
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	Epoch           int16  `json:"epoch"`
	CheckpointID    int64  `json:"checkpoint_id"`
}

type keyedView struct {
	LayoutVersion int              `json:"layout_version"`
	KeyGroups     int              `json:"key_groups"`
	MinKeyGroup   int              `json:"min_key_group"`
	MaxKeyGroup   int              `json:"max_key_group"`
	States        []keyedStateView `json:"states"`
}

type keyedStateView struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Bytes     int    `json:"bytes"`
	KeyGroups int    `json:"key_groups"`
}

type undecodedView struct {
	// Why it was not decoded.
	Reason string `json:"reason"`
	// Items and Version are the list framing's, when it was readable.
	Items   *int   `json:"items,omitempty"`
	Version *int   `json:"serializer_version,omitempty"`
	Head    string `json:"head_hex"`
}

// placeInSlot marks r as slot sc's checkpoint and moves the pending
// Kafka splits the owner rule gives other slots out of Pending: a slot's
// enumerator holds every split of its sources, and only the slot's own
// reader registers, so the others' stay in its state for good.
func placeInSlot(r *showReport, sc slotinspect.SlotCheckpoint) {
	r.Slot = &slotView{Job: sc.Job, Slot: sc.Slot, Epoch: sc.Epoch, Slots: sc.Slots}
	for i := range r.Operators {
		op := r.Operators[i].Enumerator
		if op == nil || op.Enumerator == nil {
			continue
		}
		e := op.Enumerator
		pending := e.Pending[:0:0]
		for _, sp := range e.Pending {
			if sp.Connector == "kafka" && sp.Partition != nil {
				if owner := slotinspect.SlotOfPartition(sc.Job, sp.Topic, *sp.Partition, sc.Slots); owner != sc.Slot {
					sp.Slot = &owner
					e.OtherSlots = append(e.OtherSlots, sp)
					continue
				}
			}
			pending = append(pending, sp)
		}
		e.Pending = pending
	}
}

// format is one serializer of a connector: its name in the output, the Go
// type name the engine records for what it encodes, and its decoder.
type format[V any] struct {
	name   string
	typ    string
	decode func(version int, data []byte) (V, error)
}

var splitFormats = []format[splitView]{
	{"kafka split", typeName[kafka.Split](), func(v int, b []byte) (splitView, error) {
		s, err := kafka.SplitSerializer{}.Deserialize(v, b)
		return kafkaSplitView(s), err
	}},
	{"file split", typeName[file.Split](), func(v int, b []byte) (splitView, error) {
		s, err := file.SplitSerializer{}.Deserialize(v, b)
		return fileSplitView(s), err
	}},
}

var enumFormats = []format[enumView]{
	{"kafka enumerator state", typeName[kafka.EnumeratorState](), func(v int, b []byte) (enumView, error) {
		st, err := kafka.EnumeratorStateSerializer{}.Deserialize(v, b)
		if err != nil {
			return enumView{}, err
		}
		done := st.InitialDiscoveryDone
		e := enumView{InitialDiscoveryDone: &done, Pending: []splitView{}}
		for _, tp := range st.Assigned {
			e.Assigned = append(e.Assigned, tp.String())
		}
		for _, s := range st.Pending {
			e.Pending = append(e.Pending, kafkaSplitView(s))
		}
		return e, nil
	}},
	{"file enumerator state", typeName[file.EnumeratorState](), func(v int, b []byte) (enumView, error) {
		st, err := file.EnumeratorStateSerializer{}.Deserialize(v, b)
		if err != nil {
			return enumView{}, err
		}
		e := enumView{Pending: []splitView{}}
		for _, s := range st.Pending {
			e.Pending = append(e.Pending, fileSplitView(s))
		}
		return e, nil
	}},
}

var committableFormats = []format[committableView]{
	{"kafka committable", typeName[txn.Committable](), func(v int, b []byte) (committableView, error) {
		c, err := kafka.CommittableSerializer{}.Deserialize(v, b)
		return committableView{TransactionalID: c.TransactionalID, ProducerID: c.ProducerID, Epoch: c.Epoch, CheckpointID: c.CheckpointID}, err
	}},
}

// typeName is the name the engine records for T (reflect's String).
func typeName[T any]() string { return reflect.TypeFor[T]().String() }

func kafkaSplitView(s kafka.Split) splitView {
	p := s.Partition
	v := splitView{Connector: "kafka", ID: s.SplitID(), Topic: s.Topic, Partition: &p, Offset: s.StartingOffset}
	if s.Bounded() {
		stop := s.StoppingOffset
		v.StoppingOffset = &stop
	}
	return v
}

func fileSplitView(s file.Split) splitView {
	start, end := s.Start, s.End
	return splitView{Connector: "file", ID: s.ID, Path: s.Path, Start: &start, End: &end, Offset: s.Offset}
}

// pick chooses the format of items: the one whose type the signature
// names, else (typ == "") the first that decodes every item. It returns
// the decoded values, the format's name and version and how it was
// recognised, or why nothing was decoded.
func pick[V any](formats []format[V], typ string, version int, items [][]byte) (out []V, name, by string, why string) {
	decodeAll := func(f format[V]) ([]V, error) {
		vs := make([]V, 0, len(items))
		for _, it := range items {
			v, err := f.decode(version, it)
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		return vs, nil
	}
	if typ != "" {
		for _, f := range formats {
			if f.typ != typ {
				continue
			}
			vs, err := decodeAll(f)
			if err != nil {
				return nil, "", "", fmt.Sprintf("the job signature says %s, but it does not decode as %s v%d: %v", typ, f.name, version, err)
			}
			return vs, fmt.Sprintf("%s v%d", f.name, version), bySignature, ""
		}
		return nil, "", "", fmt.Sprintf("type %s is not one of splitflow's connector formats", typ)
	}
	for _, f := range formats {
		if vs, err := decodeAll(f); err == nil {
			return vs, fmt.Sprintf("%s v%d", f.name, version), byTrial, ""
		}
	}
	return nil, "", "", "no signature in the job fingerprint, and no known format decodes it"
}

func undecoded(data []byte, reason string, items, version *int) *undecodedView {
	head := data
	const headLen = 32
	if len(head) > headLen {
		head = head[:headLen]
	}
	h := hex.EncodeToString(head)
	if len(data) > headLen {
		h += "..."
	}
	return &undecodedView{Reason: reason, Items: items, Version: version, Head: h}
}

// inspectCheckpoint decodes every state of c, and tells which of its
// shared files the other retained checkpoints use too.
func inspectCheckpoint(c *checkpoint.Checkpoint, others []checkpoint.Metadata) (showReport, error) {
	r := showReport{Checkpoint: c.ID, Taken: c.Timestamp, Fingerprint: c.Fingerprint, Savepoint: c.Savepoint, Files: []fileView{}, Operators: []operatorView{}}
	sigs, _ := checkpoint.ParseSignatures(c.Fingerprint)
	use := checkpoint.FileUse(others...)
	for _, f := range c.Files() {
		r.SharedFiles++
		r.SharedBytes += f.Size
		if len(use[f.Name]) == 0 {
			r.OnlyHereBytes += f.Size
		}
	}
	byUID := map[string][]checkpoint.StateHandle{}
	var uids []string
	for _, h := range c.States {
		fv := fileView{Owner: h.Owner.String(), File: h.File, Bytes: h.Size, CRC32: fmt.Sprintf("%08x", h.CRC32C)}
		for _, f := range h.Files {
			fv.SharedFiles = append(fv.SharedFiles, sharedFileView{Name: f.Name, Bytes: f.Size, CRC32: fmt.Sprintf("%08x", f.CRC32C), AlsoIn: append([]int64{}, use[f.Name]...)})
		}
		r.Files = append(r.Files, fv)
		if _, ok := byUID[h.Owner.UID]; !ok {
			uids = append(uids, h.Owner.UID)
		}
		byUID[h.Owner.UID] = append(byUID[h.Owner.UID], h)
	}
	slices.Sort(uids)
	for _, uid := range uids {
		blobs := map[int][]byte{}
		var subtasks []int
		for _, h := range byUID[uid] {
			data, _, err := c.State(h.Owner)
			if err != nil {
				return r, err
			}
			blobs[h.Owner.Subtask] = data
			if !h.Owner.IsCoordinator() {
				subtasks = append(subtasks, h.Owner.Subtask)
			}
		}
		slices.Sort(subtasks)
		r.Operators = append(r.Operators, inspectOperator(uid, sigs[uid], blobs, subtasks))
	}
	return r, nil
}

func inspectOperator(uid string, sig checkpoint.Signature, blobs map[int][]byte, subtasks []int) operatorView {
	op := operatorView{UID: uid, Signature: sig.Raw, MaxParallelism: sig.MaxParallelism}
	_, hasCoordinator := blobs[checkpoint.CoordinatorSubtask]
	kind := sig.Kind
	if kind == "" {
		kind = guessKind(blobs, subtasks, hasCoordinator)
	}
	if hasCoordinator {
		v := inspectEnumerator(sig, blobs[checkpoint.CoordinatorSubtask])
		op.Enumerator = &v
	}
	for _, s := range subtasks {
		data := blobs[s]
		var v stateView
		switch kind {
		case checkpoint.KindSource:
			v = inspectReader(sig, data)
		case checkpoint.KindTwoPhaseSink:
			v = inspectSink(sig, data)
		case checkpoint.KindKeyedProcess:
			v = inspectKeyed(data)
		case checkpoint.KindShuffleDecode:
			v = stateView{Undecoded: undecoded(data, "the watermarks of the upstream slots per partition a distributed job's shuffle reader keeps; not decoded here", nil, nil)}
		default:
			v = stateView{Undecoded: undecoded(data, "no signature in the job fingerprint, and no known layout decodes it", nil, nil)}
		}
		if sig.Kind == "" && v.Format != "" {
			v.RecognisedBy = byTrial
		}
		v.Subtask, v.Bytes = s, int64(len(data))
		op.Subtasks = append(op.Subtasks, v)
	}
	switch kind {
	case checkpoint.KindSource:
		op.Kind = "source"
	case checkpoint.KindTwoPhaseSink:
		op.Kind = "two-phase sink"
	case checkpoint.KindKeyedProcess:
		op.Kind = "keyed"
	case checkpoint.KindShuffleDecode:
		op.Kind = "shuffle reader"
	default:
		op.Kind = "unknown"
	}
	return op
}

// guessKind tells the kind of an operator without a signature: only
// sources have a coordinator; otherwise the layout that reads every
// subtask's state.
func guessKind(blobs map[int][]byte, subtasks []int, hasCoordinator bool) string {
	if hasCoordinator {
		return checkpoint.KindSource
	}
	if len(subtasks) == 0 {
		return ""
	}
	all := func(ok func([]byte) bool) bool {
		for _, s := range subtasks {
			if !ok(blobs[s]) {
				return false
			}
		}
		return true
	}
	if all(func(b []byte) bool { _, _, err := checkpoint.DecodeKeyedState(b); return err == nil }) {
		return checkpoint.KindKeyedProcess
	}
	if all(func(b []byte) bool {
		cs, _, err := checkpoint.DecodeTwoPhaseSink(b)
		if err == nil {
			_, _, err = checkpoint.DecodeList(cs)
		}
		return err == nil
	}) {
		return checkpoint.KindTwoPhaseSink
	}
	return ""
}

func inspectEnumerator(sig checkpoint.Signature, data []byte) stateView {
	v := stateView{Subtask: checkpoint.CoordinatorSubtask, Bytes: int64(len(data))}
	version, payload, err := checkpoint.DecodeVersioned(data)
	if err != nil {
		v.Undecoded = undecoded(data, err.Error(), nil, nil)
		return v
	}
	es, name, by, why := pick(enumFormats, sig.Types["enum"], version, [][]byte{payload})
	if why != "" {
		// The dump starts where the size counts from, as the readers'
		// do: with the serializer version.
		v.Undecoded = undecoded(data, why, nil, &version)
		return v
	}
	v.Format, v.RecognisedBy, v.Enumerator = name, by, &es[0]
	return v
}

func inspectReader(sig checkpoint.Signature, data []byte) stateView {
	var v stateView
	version, items, err := checkpoint.DecodeList(data)
	if err != nil {
		v.Undecoded = undecoded(data, err.Error(), nil, nil)
		return v
	}
	if len(items) == 0 {
		v.Splits = []splitView{}
		return v // nothing to recognise
	}
	splits, name, by, why := pick(splitFormats, sig.Types["split"], version, items)
	if why != "" {
		n := len(items)
		v.Undecoded = undecoded(data, why, &n, &version)
		return v
	}
	v.Format, v.RecognisedBy, v.Splits = name, by, splits
	return v
}

func inspectSink(sig checkpoint.Signature, data []byte) stateView {
	var v stateView
	cs, ws, err := checkpoint.DecodeTwoPhaseSink(data)
	if err == nil {
		v.WriterStateBytes = len(ws)
	}
	var version int
	var items [][]byte
	if err == nil {
		version, items, err = checkpoint.DecodeList(cs)
	}
	if err != nil {
		v.Undecoded = undecoded(data, err.Error(), nil, nil)
		return v
	}
	if len(items) == 0 {
		v.Committables = []committableView{}
		return v
	}
	got, name, by, why := pick(committableFormats, sig.Types["committable"], version, items)
	if why != "" {
		n := len(items)
		v.Undecoded = undecoded(cs, why, &n, &version)
		return v
	}
	v.Format, v.RecognisedBy, v.Committables = name, by, got
	return v
}

// inspectKeyed sums a keyed operator's state by state and key group; keys
// and values are the job's types and stay encoded.
func inspectKeyed(data []byte) stateView {
	var v stateView
	version, entries, err := checkpoint.DecodeKeyedState(data)
	if err != nil {
		v.Undecoded = undecoded(data, err.Error(), nil, nil)
		return v
	}
	k := &keyedView{LayoutVersion: version, MinKeyGroup: -1, MaxKeyGroup: -1, States: []keyedStateView{}}
	groups := map[int]bool{}
	type stateKey struct{ name, kind string }
	perState := map[stateKey]*keyedStateView{}
	stateGroups := map[stateKey]map[int]bool{}
	var order []stateKey
	for _, e := range entries {
		groups[e.KeyGroup] = true
		if k.MinKeyGroup < 0 || e.KeyGroup < k.MinKeyGroup {
			k.MinKeyGroup = e.KeyGroup
		}
		k.MaxKeyGroup = max(k.MaxKeyGroup, e.KeyGroup)
		sk := stateKey{e.Name, e.Kind}
		if perState[sk] == nil {
			perState[sk] = &keyedStateView{Name: e.Name, Kind: e.Kind}
			stateGroups[sk] = map[int]bool{}
			order = append(order, sk)
		}
		perState[sk].Bytes += e.Size
		stateGroups[sk][e.KeyGroup] = true
	}
	slices.SortFunc(order, func(a, b stateKey) int { return strings.Compare(a.name+"\x00"+a.kind, b.name+"\x00"+b.kind) })
	for _, sk := range order {
		s := *perState[sk]
		s.KeyGroups = len(stateGroups[sk])
		k.States = append(k.States, s)
	}
	k.KeyGroups = len(groups)
	v.Format, v.RecognisedBy, v.Keyed = fmt.Sprintf("keyed state layout v%d", version), bySignature, k
	return v
}

func writeJSON(w io.Writer, r showReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeText prints r for people: the metadata and files as before, then
// what each operator holds.
func writeText(w io.Writer, r showReport) error {
	kind := "checkpoint"
	if r.Savepoint {
		kind = "savepoint " // a copy a job starts from (--from-savepoint); the values stay aligned
	}
	fmt.Fprintf(w, "%s %d\ntaken      %s\njob        %s\nstates     %d\n", kind, r.Checkpoint, r.Taken.Format(time.RFC3339Nano), r.Fingerprint, len(r.Files))
	if r.Slot != nil {
		fmt.Fprintf(w, "slot       %d of %d of distributed job %s, claim epoch %d\n", r.Slot.Slot, r.Slot.Slots, r.Slot.Job, r.Slot.Epoch)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tFILE\tBYTES\tCRC32C")
	for _, f := range r.Files {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", f.Owner, f.File, f.Bytes, f.CRC32)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.SharedFiles > 0 {
		if err := writeSharedFiles(w, r); err != nil {
			return err
		}
	}
	for _, op := range r.Operators {
		fmt.Fprintf(w, "\n%s: %s", op.UID, op.Kind)
		if op.Signature != "" {
			fmt.Fprintf(w, " %s", op.Signature)
		} else {
			fmt.Fprint(w, " (no signature in the job fingerprint)")
		}
		if op.MaxParallelism > 0 {
			fmt.Fprintf(w, " max parallelism %d", op.MaxParallelism)
		}
		fmt.Fprintln(w)
		if op.Enumerator != nil {
			writeState(w, "enumerator", *op.Enumerator)
		}
		for _, s := range op.Subtasks {
			writeState(w, "subtask "+strconv.Itoa(s.Subtask), s)
		}
	}
	return nil
}

// writeSharedFiles lists each owner's shared files and the other retained
// checkpoints that use them.
func writeSharedFiles(w io.Writer, r showReport) error {
	fmt.Fprintf(w, "\nshared files: %d, %d bytes; %d bytes of them in no other retained checkpoint\n", r.SharedFiles, r.SharedBytes, r.OnlyHereBytes)
	for _, u := range r.SharingUnknown {
		fmt.Fprintf(w, "not known what is shared with %s\n", u)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tSHARED FILE\tBYTES\tCRC32C\tALSO IN")
	for _, f := range r.Files {
		for _, sf := range f.SharedFiles {
			also := make([]string, len(sf.AlsoIn))
			for i, id := range sf.AlsoIn {
				also[i] = "chk-" + strconv.FormatInt(id, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", f.Owner, sf.Name, sf.Bytes, sf.CRC32, orNone(strings.Join(also, ", ")))
		}
	}
	return tw.Flush()
}

func writeState(w io.Writer, who string, s stateView) {
	fmt.Fprintf(w, "  %s: %d bytes", who, s.Bytes)
	if s.Format != "" {
		fmt.Fprintf(w, ", %s (recognised by %s)", s.Format, s.RecognisedBy)
	}
	fmt.Fprintln(w)
	const indent = "    "
	switch {
	case s.Undecoded != nil:
		u := s.Undecoded
		fmt.Fprintf(w, "%snot decoded: %s\n", indent, u.Reason)
		if u.Items != nil {
			fmt.Fprintf(w, "%s%d item(s), serializer version %d\n", indent, *u.Items, *u.Version)
		} else if u.Version != nil {
			fmt.Fprintf(w, "%sserializer version %d\n", indent, *u.Version)
		}
		fmt.Fprintf(w, "%shex: %s\n", indent, u.Head)
	case s.Splits != nil:
		if len(s.Splits) == 0 {
			fmt.Fprintf(w, "%sno splits\n", indent)
			return
		}
		writeSplits(w, indent, s.Splits)
	case s.Enumerator != nil:
		e := s.Enumerator
		if e.InitialDiscoveryDone != nil {
			fmt.Fprintf(w, "%sinitial discovery done: %v\n", indent, *e.InitialDiscoveryDone)
		}
		if e.InitialDiscoveryDone != nil || len(e.Assigned) > 0 {
			fmt.Fprintf(w, "%sassigned (%d): %s\n", indent, len(e.Assigned), orNone(strings.Join(e.Assigned, " ")))
		}
		fmt.Fprintf(w, "%spending (%d):", indent, len(e.Pending))
		if len(e.Pending) == 0 {
			fmt.Fprintln(w, " none")
			return
		}
		fmt.Fprintln(w)
		writeSplits(w, indent+"  ", e.Pending)
		if len(e.OtherSlots) > 0 {
			fmt.Fprintf(w, "%sother slots' (%d), read by those slots:\n", indent, len(e.OtherSlots))
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "%s  TOPIC\tPARTITION\tSLOT\n", indent)
			for _, sp := range e.OtherSlots {
				fmt.Fprintf(tw, "%s  %s\t%d\t%d\n", indent, sp.Topic, *sp.Partition, *sp.Slot)
			}
			_ = tw.Flush()
		}
	case s.Committables != nil:
		if len(s.Committables) == 0 {
			fmt.Fprintf(w, "%sno pending committables\n", indent)
		} else {
			fmt.Fprintf(w, "%spending committables (%d):\n", indent, len(s.Committables))
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "%s  TRANSACTIONAL ID\tPRODUCER ID\tEPOCH\tCHECKPOINT\n", indent)
			for _, c := range s.Committables {
				fmt.Fprintf(tw, "%s  %s\t%d\t%d\t%d\n", indent, c.TransactionalID, c.ProducerID, c.Epoch, c.CheckpointID)
			}
			_ = tw.Flush()
		}
		if s.WriterStateBytes > 0 {
			fmt.Fprintf(w, "%swriter state: %d bytes (not decoded)\n", indent, s.WriterStateBytes)
		}
	case s.Keyed != nil:
		k := s.Keyed
		if k.KeyGroups == 0 {
			fmt.Fprintf(w, "%sno keyed state\n", indent)
			return
		}
		fmt.Fprintf(w, "%s%d key group(s) in [%d, %d]; keys and values are the job's types and are not decoded\n", indent, k.KeyGroups, k.MinKeyGroup, k.MaxKeyGroup)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s  STATE\tKIND\tBYTES\tKEY GROUPS\n", indent)
		for _, st := range k.States {
			fmt.Fprintf(tw, "%s  %s\t%s\t%d\t%d\n", indent, st.Name, st.Kind, st.Bytes, st.KeyGroups)
		}
		_ = tw.Flush()
	}
}

func writeSplits(w io.Writer, indent string, splits []splitView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, s := range splits {
		switch s.Connector {
		case "kafka":
			if !header {
				fmt.Fprintf(tw, "%sTOPIC\tPARTITION\tOFFSET\tSTOPPING OFFSET\n", indent)
				header = true
			}
			stop := "none (unbounded)"
			if s.StoppingOffset != nil {
				stop = strconv.FormatInt(*s.StoppingOffset, 10)
			}
			fmt.Fprintf(tw, "%s%s\t%d\t%d\t%s\n", indent, s.Topic, *s.Partition, s.Offset, stop)
		case "file":
			if !header {
				fmt.Fprintf(tw, "%sPATH\tRANGE\tOFFSET\n", indent)
				header = true
			}
			fmt.Fprintf(tw, "%s%s\t[%d, %d)\t%d\n", indent, s.Path, *s.Start, *s.End, s.Offset)
		}
	}
	_ = tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
