module github.com/splitflow/splitflow/deploy

go 1.26.8
