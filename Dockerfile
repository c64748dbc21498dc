# syntax=docker/dockerfile:1
#
# The image of one splitflow program and the splitflow CLI, static and
# non-root. By default the program is examples/wordcount; any main package
# of this module can be built instead:
#
#   docker build -t splitflow:dev .
#   docker build --build-arg PROGRAM=./examples/windowcount -t windowcount:dev .
#
# The program is /usr/local/bin/splitflow-job (the entrypoint), the CLI
# /usr/local/bin/splitflow (docker run --entrypoint splitflow ... job status).
# deploy/helm/splitflow runs the image as a distributed job; docs/deploy.md
# tells how. deploy/image_test.go checks the rules below without a Docker
# engine: keep them when editing.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# The module download is a layer of its own, so that a change of the code
# alone does not download the modules again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The main package to build: ./examples/... or ./cmd/....
ARG PROGRAM=./examples/wordcount
# Static binaries (no libc: the final stage has none), without the build
# machine's paths in them.
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/splitflow-job "${PROGRAM}" && \
    go build -trimpath -ldflags="-s -w" -o /out/splitflow ./cmd/splitflow

# distroless static: CA certificates (TLS to Kafka and S3), tzdata, no
# shell, and the user nonroot (65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/splitflow-job /usr/local/bin/splitflow-job
COPY --from=build /out/splitflow /usr/local/bin/splitflow
USER 65532:65532
# The status server (--http 0.0.0.0:8081): /metrics, /healthz, /readyz.
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/splitflow-job"]
