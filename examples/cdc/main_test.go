package main

import (
	"io"
	"strings"
	"testing"
)

// Bad or missing flags are refused, each named.
func TestFlagsAreChecked(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"--brokers", "b:9092", "--checkpoint-interval", "0"}, &out)
	if err == nil {
		t.Fatal("no error for missing --postgres and --topic and a zero interval")
	}
	for _, want := range []string{"--postgres is required", "--topic is required", "--checkpoint-interval must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	o, err := parseFlags([]string{"--postgres", "postgres://u@h/db", "--tables", "public.a, b", "--brokers", "b:9092", "--topic", "t"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.tables) != 2 || o.tables[0] != "public.a" || o.tables[1] != "b" {
		t.Fatalf("tables %q", o.tables)
	}
}
