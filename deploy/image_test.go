package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the main module's directory, the Dockerfile's build context.
const repoRoot = ".."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
	line int
}

// stage is one FROM and the instructions under it.
type stage struct {
	from, name string
	ins        []instruction
}

// parseDockerfile reads the instructions the rules below need: comments
// and parser directives are dropped, lines ending in a backslash joined.
// It is no full Dockerfile parser (no heredocs, no escape directive), and
// fails the test on what it does not know rather than guess.
func parseDockerfile(t *testing.T, path string) (global []instruction, stages []stage) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cur strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.Contains(line, "<<") {
			t.Fatalf("%s:%d: heredocs are not checked by this test; write the step as RUN with && instead", path, n)
		}
		if c, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " "), line: start}
		cur.Reset()
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			global = append(global, in)
		} else {
			stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		}
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: ends in a continuation line", path)
	}
	return global, stages
}

// The image's rules: multi-stage; the program built static (CGO_ENABLED=0)
// with -trimpath from the PROGRAM argument, wordcount by default; the
// module download a layer of its own, before the sources are copied; the
// final stage a base without libc or shell, running as a non-root user,
// with the program and the splitflow CLI copied in.
func TestDockerfileBuildsAStaticNonRootImageOfProgramAndCLI(t *testing.T) {
	_, stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("%d stages; the build must be multi-stage, so the toolchain stays out of the image", len(stages))
	}
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final stage FROM %s: want distroless static or scratch (no libc, no shell)", final.from)
	}
	var user string
	for _, in := range final.ins {
		if in.cmd == "USER" {
			user = in.args
		}
	}
	name, _, _ := strings.Cut(user, ":")
	switch {
	case user == "":
		t.Error("final stage has no USER: the image would run as root")
	case name == "0" || name == "root":
		t.Errorf("final stage USER %s is root", user)
	case strings.Trim(name, "0123456789") != "":
		// A numeric user lets Kubernetes' runAsNonRoot check it without
		// reading /etc/passwd, which scratch does not have.
		t.Errorf("final stage USER %s: give a numeric uid", user)
	}

	build := map[string]stage{}
	for _, s := range stages[:len(stages)-1] {
		build[s.name] = s
	}
	copied := map[string]bool{} // paths COPY --from copies into the final stage
	for _, in := range final.ins {
		if in.cmd != "COPY" || !strings.HasPrefix(in.args, "--from=") {
			continue
		}
		f := strings.Fields(in.args)
		from := strings.TrimPrefix(f[0], "--from=")
		if _, ok := build[from]; !ok {
			t.Errorf("line %d: COPY --from=%s names no build stage", in.line, from)
		}
		for _, src := range f[1 : len(f)-1] {
			copied[src] = true
		}
	}
	var entrypoint string
	for _, in := range final.ins {
		if in.cmd == "ENTRYPOINT" {
			entrypoint = in.args
		}
	}
	if !strings.HasPrefix(entrypoint, "[") {
		t.Errorf("ENTRYPOINT %q: want the exec form, there is no shell in the image", entrypoint)
	}

	// The build stage: every go build static, trimmed, and one of them
	// of ${PROGRAM}, one of ./cmd/splitflow, both outputs copied.
	var program string
	var cgoOff, downloaded, sourcesCopied, builtProgram, builtCLI bool
	for _, s := range build {
		for _, in := range s.ins {
			switch in.cmd {
			case "ARG":
				if v, ok := strings.CutPrefix(in.args, "PROGRAM="); ok {
					program = v
				}
			case "ENV":
				if strings.Contains(" "+in.args+" ", " CGO_ENABLED=0 ") {
					cgoOff = true
				}
			case "COPY":
				f := strings.Fields(in.args)
				if len(f) >= 2 && f[0] == "." {
					sourcesCopied = true
				}
			case "RUN":
				if strings.Contains(in.args, "go mod download") {
					if sourcesCopied {
						t.Errorf("line %d: go mod download after the sources are copied: every code change would download the modules again", in.line)
					}
					downloaded = true
				}
				for _, cmd := range strings.Split(in.args, "&&") {
					if !strings.Contains(cmd, "go build") {
						continue
					}
					if !strings.Contains(cmd, "-trimpath") {
						t.Errorf("line %d: %q without -trimpath", in.line, strings.TrimSpace(cmd))
					}
					if !cgoOff && !strings.Contains(cmd, "CGO_ENABLED=0") {
						t.Errorf("line %d: %q with cgo: the final stage has no libc", in.line, strings.TrimSpace(cmd))
					}
					out := ""
					if _, after, ok := strings.Cut(cmd, " -o "); ok {
						out = strings.Fields(after)[0]
					}
					if !copied[out] {
						t.Errorf("line %d: %q builds %q, which the final stage does not copy", in.line, strings.TrimSpace(cmd), out)
					}
					switch {
					case strings.Contains(cmd, "${PROGRAM}") || strings.Contains(cmd, "$PROGRAM"):
						builtProgram = true
					case strings.Contains(cmd, "./cmd/splitflow"):
						builtCLI = true
					}
				}
			}
		}
	}
	if program != "./examples/wordcount" {
		t.Errorf("ARG PROGRAM default %q, want ./examples/wordcount", program)
	}
	if !downloaded {
		t.Error("no RUN go mod download: the modules are not cached in a layer of their own")
	}
	if !builtProgram {
		t.Error("no go build of ${PROGRAM}")
	}
	if !builtCLI {
		t.Error("no go build of ./cmd/splitflow: the image lacks the CLI")
	}

	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", ".cache"} {
		if !strings.Contains("\n"+string(ignore)+"\n", "\n"+want+"\n") {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

var (
	buildOnce sync.Once
	binDir    string
	ownDir    bool // binDir was made here, and is removed by TestMain
	buildErr  error
	buildOut  []byte
)

// staticBinaries builds examples/wordcount and cmd/splitflow as the
// Dockerfile does (CGO_ENABLED=0, -trimpath), once for every test that
// needs them, and returns the directory that holds them. Under `make
// test` the Makefile has built them with the same flags, beside the
// tests, into $SPLITFLOW_TEST_BINARIES (one build for this module's tests
// and the main module's, which run the same programs): the tests wait for
// that build and check its binaries instead.
func staticBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if dir := os.Getenv("SPLITFLOW_TEST_BINARIES"); dir != "" {
			binDir = dir
			buildOut, buildErr = waitForRunner(dir)
			return
		}
		// Not t.TempDir: the binaries outlive the first test that asks.
		if binDir, buildErr = os.MkdirTemp("", "splitflow-image-"); buildErr != nil {
			return
		}
		ownDir = true
		gocmd := filepath.Join(goruntime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gocmd); err != nil {
			gocmd = "go"
		}
		cmd := exec.Command(gocmd, "build", "-trimpath", "-o", binDir+string(filepath.Separator), "./examples/wordcount", "./cmd/splitflow")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("CGO_ENABLED=0 go build -trimpath ./examples/wordcount ./cmd/splitflow: %v\n%s", buildErr, buildOut)
	}
	return binDir
}

// waitForRunner waits until the Makefile's build into dir has ended: it
// leaves a file "ready", or "failed" holding the build's output (the
// protocol of the main module's internal/testbin). The bound only
// catches a hang: a cold build on a loaded machine takes minutes.
func waitForRunner(dir string) ([]byte, error) {
	deadline := time.Now().Add(15 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return nil, nil
		}
		if out, err := os.ReadFile(filepath.Join(dir, "failed")); err == nil {
			return out, fmt.Errorf("the Makefile's build into %s failed", dir)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the Makefile's build into %s has not ended after 15m", dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ownDir {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// The binaries the image holds are static: no program interpreter (the
// dynamic loader, absent from the final stage) and no dynamic section;
// and -trimpath left the build machine's paths out of them.
func TestProgramAndCLIBuildStatic(t *testing.T) {
	dir := staticBinaries(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"wordcount", "splitflow"} {
		path := filepath.Join(dir, name)
		f, err := elf.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s has a %s program header: it is linked dynamically", name, p.Type)
			}
		}
		if s := f.Section(".dynamic"); s != nil {
			t.Errorf("%s has a .dynamic section", name)
		}
		f.Close()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(root+string(filepath.Separator))) {
			t.Errorf("%s holds the path of the build's sources %s: built without -trimpath", name, root)
		}
	}
}
