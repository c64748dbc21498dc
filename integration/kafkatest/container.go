//go:build docker

package kafkatest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// withContainer says this build has the container path (the docker build
// tag, which brings in testcontainers-go).
const withContainer = true

// containerBroker runs the apache/kafka image with the same single-node
// settings as the local broker. The host port is chosen up front and bound
// fixed, because the broker must advertise it and Start after Stop must
// come back on it.
type containerBroker struct {
	c testcontainers.Container
}

func startContainer(ctx context.Context) (*Broker, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("kafkatest: find a free port: %w", err)
	}
	p := strconv.Itoa(port)
	req := testcontainers.ContainerRequest{
		Image:        ContainerImage,
		ExposedPorts: []string{p + ":9092/tcp"},
		Env: map[string]string{
			"KAFKA_NODE_ID":                                                     "1",
			"KAFKA_PROCESS_ROLES":                                               "broker,controller",
			"KAFKA_LISTENERS":                                                   "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
			"KAFKA_ADVERTISED_LISTENERS":                                        "PLAINTEXT://127.0.0.1:" + p,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                                   "CONTROLLER",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                                    "1@localhost:9093",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                              "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                            "1",
			"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                                "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":                    "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                               "1",
			"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":                        "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                            "0",
			"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                                "500",
			"KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "2000",
			"KAFKA_NUM_PARTITIONS":                                              "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR":            "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":                       "1",
		},
		WaitingFor: wait.ForLog("Kafka Server started").WithStartupTimeout(startTimeout()),
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if err != nil {
		if c != nil {
			c.Terminate(context.Background()) //nolint:errcheck // the start error is the one to report
		}
		return nil, fmt.Errorf("kafkatest: start container %s: %w", ContainerImage, err)
	}
	cb := &containerBroker{c: c}
	addr := "127.0.0.1:" + p
	if err := waitReady(ctx, []string{addr}, startTimeout(), func() string { return cb.logTail(20) }); err != nil {
		_ = cb.close()
		return nil, fmt.Errorf("kafkatest: container %s: %w", ContainerImage, err)
	}
	return &Broker{kind: KindContainer, addrs: []string{addr}, be: cb}, nil
}

func (cb *containerBroker) stop(ctx context.Context) error {
	timeout := 30 * time.Second
	return cb.c.Stop(ctx, &timeout)
}

func (cb *containerBroker) start(ctx context.Context) error {
	if err := cb.c.Start(ctx); err != nil {
		return err
	}
	ep, err := cb.c.PortEndpoint(ctx, "9092/tcp", "")
	if err != nil {
		return err
	}
	return waitReady(ctx, []string{ep}, startTimeout(), func() string { return cb.logTail(20) })
}

func (cb *containerBroker) close() error {
	return cb.c.Terminate(context.Background())
}

func (cb *containerBroker) logTail(n int) string {
	rc, err := cb.c.Logs(context.Background())
	if err != nil {
		return "(no container log: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		k, err := rc.Read(buf)
		sb.Write(buf[:k])
		if err != nil {
			break
		}
	}
	return lastLines(sb.String(), n)
}
