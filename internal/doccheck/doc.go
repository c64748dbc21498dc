// Package doccheck holds the test that compiles the Go code blocks of
// README.md and docs/*.md, so that the documentation cannot drift from
// the API it shows.
//
// Every fenced block carries a language. A ```go block is one of:
//
//   - a whole file: it starts with a package clause (after comments),
//     "package main" for a program, and is built as it stands;
//   - a fragment: the line right before its fence is a marker
//     <!-- wrap: NAME -->, and the block is put into
//     testdata/wrappers/NAME.go in place of the line "//doc:fragment".
//     A wrapper declares the imports and the variables a fragment uses
//     (a stream, an environment, a context, ...) and uses each import
//     once, so that a fragment need not use all of them.
//
// A block of any language marked <!-- copy of: PATH --> on the line
// before its fence must equal the repository's file PATH, byte for byte:
// a file shown whole cannot drift from the one that is built and tested.
//
// Blocks that are not Go are marked as their language (```sh, ```text,
// ```json, ...); a fence without a language fails the test, so that no
// Go block escapes it by accident.
//
// Each Go block becomes a package of a temporary module that requires
// github.com/splitflow/splitflow, replaced by this repository, with the
// repository's go.sum; `go vet` builds and checks them all at once,
// offline (GOPROXY=off, GOFLAGS=-mod=mod). The blocks therefore see only
// what a user's module sees: no internal packages.
package doccheck
