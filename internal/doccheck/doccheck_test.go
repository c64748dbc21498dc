package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file string // relative to the repository root
	line int    // of the opening fence, 1-based
	lang string
	wrap string // the wrapper named by a marker before the fence, or ""
	copy string // the file a copy marker before the fence names, or ""
	body string
}

var (
	fenceRE  = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([^\\s`]*)")
	markerRE = regexp.MustCompile(`^\s*<!--\s*wrap:\s*([A-Za-z0-9_-]+)\s*-->\s*$`)
	copyRE   = regexp.MustCompile(`^\s*<!--\s*copy of:\s*(\S+)\s*-->\s*$`)
)

// blocks returns the fenced code blocks of one Markdown file.
func blocks(root, rel string) ([]block, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var (
		out      []block
		cur      *block
		fence    string
		prev     string
		sc       = bufio.NewScanner(bytes.NewReader(data))
		body     strings.Builder
		lineNo   int
		indentLn int
	)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if cur == nil {
			if m := fenceRE.FindStringSubmatch(line); m != nil {
				cur = &block{file: rel, line: lineNo, lang: m[3]}
				if mm := markerRE.FindStringSubmatch(prev); mm != nil {
					cur.wrap = mm[1]
				}
				if mm := copyRE.FindStringSubmatch(prev); mm != nil {
					cur.copy = mm[1]
				}
				fence, indentLn = m[2], len(m[1])
				body.Reset()
			}
			if strings.TrimSpace(line) != "" {
				prev = line
			}
			continue
		}
		if t := strings.TrimSpace(line); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
			cur.body = body.String()
			out = append(out, *cur)
			cur, prev = nil, line
			continue
		}
		// A fence indented in a list item indents its lines as much.
		if len(line) >= indentLn && strings.TrimSpace(line[:indentLn]) == "" {
			line = line[indentLn:]
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a code block is never closed", rel, cur.line)
	}
	return out, sc.Err()
}

// repoRoot is the directory of the repository's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// docFiles are the Markdown files whose code blocks are compiled.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	return files
}

var packageRE = regexp.MustCompile(`^package [A-Za-z_]\w*$`)

// isProgram reports whether a block is a whole file (a program or a
// package): its first line that is neither blank nor a comment is a
// package clause.
func isProgram(body string) bool {
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return packageRE.MatchString(l)
	}
	return false
}

// source is the Go file a block is compiled as.
func source(root string, b block) (string, error) {
	if b.wrap == "" {
		if isProgram(b.body) {
			return b.body, nil
		}
		return "", fmt.Errorf("%s:%d: a go block is neither a whole file (package ...) nor marked <!-- wrap: NAME --> on the line before its fence", b.file, b.line)
	}
	w, err := os.ReadFile(filepath.Join(root, "internal", "doccheck", "testdata", "wrappers", b.wrap+".go"))
	if err != nil {
		return "", fmt.Errorf("%s:%d: wrapper %q: %w", b.file, b.line, b.wrap, err)
	}
	slot := slotRE.FindStringSubmatch(string(w))
	if slot == nil || strings.Count(string(w), "//doc:fragment") != 1 {
		return "", fmt.Errorf("wrapper %q must hold the line //doc:fragment exactly once", b.wrap)
	}
	// A line directive makes the compiler's messages name the Markdown
	// file and the block's own lines.
	body := fmt.Sprintf("//line %s:%d\n", filepath.Join(root, b.file), b.line+1) + b.body
	if slot[1] != "" { // in a function body
		body += used(b.body)
	}
	return strings.Replace(string(w), slot[0], body, 1), nil
}

// slotRE finds a wrapper's slot; an indented one is in a function body.
var slotRE = regexp.MustCompile(`(?m)^([ \t]*)//doc:fragment\n`)

// declRE finds the names a fragment declares with := or var on a line of
// its own level (not indented).
var declRE = regexp.MustCompile(`(?m)^(?:var\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\b|([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*:=)`)

// used returns a line that uses every name a fragment of a function body
// declares at its own level, as the code after it would: Go refuses a
// local variable that is never used, and a fragment stops where the
// reader's own code would go on.
func used(body string) string {
	var names []string
	for _, m := range declRE.FindAllStringSubmatch(body, -1) {
		for _, n := range strings.Split(m[1]+m[2], ",") {
			if n = strings.TrimSpace(n); n != "_" {
				names = append(names, "_ = "+n+"\n")
			}
		}
	}
	return strings.Join(names, "")
}

// TestDocCodeBlocksCompile builds every Go block of README.md and
// docs/*.md against this repository, as a user's module would.
func TestDocCodeBlocksCompile(t *testing.T) {
	root := repoRoot(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the documentation's code: %v", err)
	}
	mod := t.TempDir()
	var n int
	for _, f := range docFiles(t, root) {
		bs, err := blocks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.lang == "" {
				t.Errorf("%s:%d: a code block without a language; mark it (go, sh, text, ...)", b.file, b.line)
				continue
			}
			if b.lang != "go" {
				if b.wrap != "" {
					t.Errorf("%s:%d: a wrap marker before a %s block", b.file, b.line, b.lang)
				}
				continue
			}
			src, err := source(root, b)
			if err != nil {
				t.Error(err)
				continue
			}
			n++
			dir := filepath.Join(mod, fmt.Sprintf("b%03d", n))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if t.Failed() {
		return
	}
	if n == 0 {
		t.Fatal("no go code blocks found in README.md and docs/*.md")
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod := fmt.Sprintf("module doccheck.example\n\ngo %s\n\nrequire github.com/splitflow/splitflow v0.0.0\n\nreplace github.com/splitflow/splitflow => %s\n",
		goVersion(t, root), root)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"vet", "./..."}
	if raceEnabled {
		args = []string{"vet", "-race", "./..."}
	}
	cmd := exec.Command(goTool, args...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet of the documentation's %d go blocks: %v\n%s", n, err, out)
	}
	t.Logf("%d go blocks compiled", n)
}

// TestDocCopiesMatchTheirFiles holds every block marked
// <!-- copy of: PATH --> to the file it shows, so that a file shown whole
// in the documentation cannot drift from the one that is built and tested.
func TestDocCopiesMatchTheirFiles(t *testing.T) {
	root := repoRoot(t)
	var n int
	for _, f := range docFiles(t, root) {
		bs, err := blocks(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.copy == "" {
				continue
			}
			n++
			want, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.copy)))
			if err != nil {
				t.Errorf("%s:%d: the block is a copy of %s: %v", b.file, b.line, b.copy, err)
				continue
			}
			if b.body != string(want) {
				t.Errorf("%s:%d: the block differs from %s, of which it is marked a copy; copy the file again", b.file, b.line, b.copy)
			}
		}
	}
	if n == 0 {
		t.Fatal("no block marked <!-- copy of: PATH --> in README.md and docs/*.md")
	}
}

// goVersion is the go line of the repository's go.mod.
func goVersion(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return string(m[1])
}

// TestBlocksParse holds the parser's rules: languages, markers, list
// indentation and unclosed fences.
func TestBlocksParse(t *testing.T) {
	dir := t.TempDir()
	md := "text\n\n<!-- wrap: job -->\n```go\nx := 1\n```\n\n- item\n\n  ```sh\n  echo hi\n  ```\n\n```\nplain\n```\n\n<!-- copy of: a/b.go -->\n```go\npackage b\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	bs, err := blocks(dir, "a.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []block{
		{file: "a.md", line: 4, lang: "go", wrap: "job", body: "x := 1\n"},
		{file: "a.md", line: 10, lang: "sh", body: "echo hi\n"},
		{file: "a.md", line: 14, lang: "", body: "plain\n"},
		{file: "a.md", line: 19, lang: "go", copy: "a/b.go", body: "package b\n"},
	}
	if len(bs) != len(want) {
		t.Fatalf("got %d blocks %+v, want %d", len(bs), bs, len(want))
	}
	for i := range want {
		if bs[i] != want[i] {
			t.Errorf("block %d = %+v, want %+v", i, bs[i], want[i])
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "b.md"), []byte("```go\nx\n"), 0o644); err == nil {
		if _, err := blocks(dir, "b.md"); err == nil {
			t.Error("an unclosed fence was not refused")
		}
	}
	if !isProgram("// c\n\npackage main\n") || !isProgram("package csvsource\n") || isProgram("x := 1\npackage main\n") {
		t.Error("isProgram does not follow its rule")
	}
	got := used("var a = 1\nb, _, c := f()\nif d := g(); d {\n\te := 2\n}\nx = 3\n")
	if want := "_ = a\n_ = b\n_ = c\n"; got != want {
		t.Errorf("used = %q, want %q", got, want)
	}
}
