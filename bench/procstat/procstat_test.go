package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	stat := "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 30 0 1000 0 0"
	d, err := ParseStatCPU([]byte(stat))
	if err != nil || d != 3*time.Second {
		t.Fatalf("got %v, %v; want 3s", d, err)
	}
	status := "Name:\tjava\nVmHWM:\t  123456 kB\nVmRSS:\t  100 kB\n"
	if got := StatusKB([]byte(status), "VmHWM:"); got != 123456 {
		t.Fatalf("VmHWM %d", got)
	}
}

func TestOwnProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := CPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	hwm, rss, err := Mem(os.Getpid())
	if err != nil || hwm <= 0 || rss <= 0 {
		t.Fatalf("VmHWM %d VmRSS %d: %v", hwm, rss, err)
	}
}
