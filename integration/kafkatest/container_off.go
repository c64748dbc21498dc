//go:build !docker

package kafkatest

import (
	"context"
	"errors"
)

// withContainer says this build has the container path. Without the docker
// build tag it has not: testcontainers-go and its dependencies (the Docker
// client, OpenTelemetry) would be compiled and linked into every test
// binary that uses a broker, and the local JVM broker needs none of them.
const withContainer = false

func startContainer(context.Context) (*Broker, error) {
	return nil, errors.New("kafkatest: built without the docker tag, so no container broker (go test -tags docker)")
}
