package kafkatest

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DocumentedACL is one `kafka-acls.sh --add` line of a document (the ACLs
// docs/security.md lists), so that tests grant exactly what users are
// told to.
type DocumentedACL struct {
	Line      string
	Operation kadm.ACLOperation
	Resource  string // topic, group, transactional-id or cluster
	Name      string // with the line's $VARIABLES
	Prefixed  bool
}

// The sections of docs/security.md that list ACLs: those of any
// exactly-once job, and those a distributed job needs besides.
const (
	JobACLs         = "The ACLs an exactly-once job needs"
	DistributedACLs = "The ACLs a distributed job needs besides"
)

// DocumentedACLs reads the lines of path that start with kafka-acls.sh
// in its section headed "## section" (up to the next "## " heading).
// Each must grant $PRINCIPAL an operation on one resource; the test fails
// on any other, and when there is none.
func DocumentedACLs(t testing.TB, path, section string) []DocumentedACL {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []DocumentedACL
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if h, ok := strings.CutPrefix(line, "## "); ok {
			in = h == section
			continue
		}
		if !in || !strings.HasPrefix(line, "kafka-acls.sh ") {
			continue
		}
		a := DocumentedACL{Line: line}
		args := strings.Fields(line)
		for i := 0; i < len(args); i++ {
			next := func() string {
				if i+1 >= len(args) {
					t.Fatalf("%s: %s ends after %s", path, line, args[i])
				}
				i++
				return args[i]
			}
			switch args[i] {
			case "--operation":
				op, err := kmsg.ParseACLOperation(next())
				if err != nil {
					t.Fatalf("%s: %s: %v", path, line, err)
				}
				a.Operation = op
			case "--topic", "--group", "--transactional-id":
				a.Resource = strings.TrimPrefix(args[i], "--")
				a.Name = next()
			case "--cluster":
				a.Resource = "cluster"
			case "--resource-pattern-type":
				a.Prefixed = next() == "prefixed"
			case "--allow-principal":
				if p := next(); p != "$PRINCIPAL" {
					t.Fatalf("%s: %s grants %s, not $PRINCIPAL", path, line, p)
				}
			}
		}
		if a.Resource == "" || a.Operation == 0 {
			t.Fatalf("%s: %s names no resource or operation", path, line)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no kafka-acls.sh lines under ## %s", path, section)
	}
	return out
}

// Expand is the resource name with vars ($INPUT: "lines") put in.
func (a DocumentedACL) Expand(vars map[string]string) string {
	name := a.Name
	for k, v := range vars {
		name = strings.ReplaceAll(name, k, v)
	}
	return name
}

// Builder is the ACL of the line for principal, its name expanded.
func (a DocumentedACL) Builder(principal string, vars map[string]string) *kadm.ACLBuilder {
	name := a.Expand(vars)
	b := kadm.NewACLs().Allow(principal).AllowHosts("*").Operations(a.Operation)
	switch a.Resource {
	case "topic":
		b = b.Topics(name)
	case "group":
		b = b.Groups(name)
	case "transactional-id":
		b = b.TransactionalIDs(name)
	case "cluster":
		b = b.Clusters()
	}
	if a.Prefixed {
		return b.ResourcePatternType(kadm.ACLPatternPrefixed)
	}
	return b.ResourcePatternType(kadm.ACLPatternLiteral)
}

// Grant adds the ACLs of the lines for principal, as the super user.
func (b *SecureBroker) Grant(t testing.TB, principal string, vars map[string]string, acls ...DocumentedACL) {
	t.Helper()
	adm := kadm.NewClient(b.AdminClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range acls {
		res, err := adm.CreateACLs(ctx, a.Builder(principal, vars))
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("kafkatest: grant %s: %v", a.Line, err)
		}
	}
}

// Revoke deletes the ACL of a line for principal, as the super user.
func (b *SecureBroker) Revoke(t testing.TB, principal string, vars map[string]string, a DocumentedACL) {
	t.Helper()
	adm := kadm.NewClient(b.AdminClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.DeleteACLs(ctx, a.Builder(principal, vars))
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("kafkatest: revoke %s: %v", a.Line, err)
	}
}
