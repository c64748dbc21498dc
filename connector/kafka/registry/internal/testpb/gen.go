//go:build ignore

// gen.go writes the Go code of the test messages (splitflow/test/*.proto)
// with protoc-gen-go, compiling the .proto files with protocompile so that
// no protoc is needed: go run gen.go, in this directory.
package main

import (
	"bytes"
	"context"
	"log"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

func main() {
	files := []string{"splitflow/test/money.proto", "splitflow/test/order.proto", "splitflow/test/order_v3.proto"}
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{"."}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := c.Compile(context.Background(), files...)
	if err != nil {
		log.Fatal(err)
	}
	// Every file the generated ones import, dependencies first.
	var all []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := range fd.Imports().Len() {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		all = append(all, protodesc.ToFileDescriptorProto(fd))
	}
	for _, f := range compiled {
		add(f)
	}
	req, err := proto.Marshal(&pluginpb.CodeGeneratorRequest{FileToGenerate: files, Parameter: proto.String("paths=source_relative"), ProtoFile: all})
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("go", "run", "google.golang.org/protobuf/cmd/protoc-gen-go")
	cmd.Stdin, cmd.Stderr = bytes.NewReader(req), os.Stderr
	out, err := cmd.Output()
	if err != nil {
		log.Fatal(err)
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		log.Fatal(err)
	}
	if resp.Error != nil {
		log.Fatal(resp.GetError())
	}
	for _, f := range resp.File {
		dir := "."
		if filepath.Base(f.GetName()) == "order_v3.pb.go" {
			dir = "v3pb" // a package of its own: its message is also named Order
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f.GetName())), []byte(f.GetContent()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
