package kafkatest

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ContainerImage is the pinned image used when a Docker engine answers and
// the tests are built with the docker tag; it runs the same Kafka release
// as the local broker.
const ContainerImage = "apache/kafka:" + KafkaVersion

// dockerAnswers reports whether a Docker engine replies to a ping within two
// seconds, on DOCKER_HOST or the default socket. A client without an engine
// (the docker CLI alone) does not count.
func dockerAnswers(ctx context.Context) bool {
	network, address := "unix", "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		switch {
		case strings.HasPrefix(h, "unix://"):
			address = strings.TrimPrefix(h, "unix://")
		case strings.HasPrefix(h, "tcp://"):
			network, address = "tcp", strings.TrimPrefix(h, "tcp://")
		default:
			return false
		}
	}
	if network == "unix" {
		if _, err := os.Stat(address); err != nil {
			return false
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
