package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/splitflow"

// scaledObject and the types below copy, field for field with the same
// types and JSON names, the part of KEDA's keda.sh/v1alpha1 ScaledObject
// the chart renders (ScaledObject, ScaledObjectSpec, ScaleTarget,
// AdvancedConfig, HorizontalPodAutoscalerConfig, ScaleTriggers and
// AuthenticationRef of github.com/kedacore/keda/v2/apis/keda/v1alpha1 at
// v2.21.0, whose behavior is the HPA's autoscaling/v2 type, as here).
// Decoding refuses any other field, so a misspelt or misplaced one fails
// here instead of being refused by the cluster's CRD, or ignored. A field
// the chart starts to render is copied from KEDA's type first.
//
// The copy rather than KEDA's module: importing its v1alpha1 package
// brings controller-runtime, client-go's clientset and informers and
// KEDA's webhooks, which doubled the cold compile of these tests (about
// 90 s more CPU), in every make test.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              scaledObjectSpec `json:"spec"`
}

type scaledObjectSpec struct {
	ScaleTargetRef  *scaleTarget    `json:"scaleTargetRef"`
	PollingInterval *int32          `json:"pollingInterval,omitempty"`
	CooldownPeriod  *int32          `json:"cooldownPeriod,omitempty"`
	MinReplicaCount *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32          `json:"maxReplicaCount,omitempty"`
	Advanced        *advancedConfig `json:"advanced,omitempty"`
	Triggers        []scaleTriggers `json:"triggers"`
}

type scaleTarget struct {
	Name       string `json:"name"`
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

type advancedConfig struct {
	HorizontalPodAutoscalerConfig *horizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
}

type horizontalPodAutoscalerConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

type scaleTriggers struct {
	Type              string             `json:"type"`
	Metadata          map[string]string  `json:"metadata"`
	AuthenticationRef *authenticationRef `json:"authenticationRef,omitempty"`
}

type authenticationRef struct {
	Name string `json:"name"`
}

// serviceMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor the chart writes.
type serviceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is the chart's manifests, each decoded strictly into its type.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	serviceAccount *corev1.ServiceAccount
	pdb            *policyv1.PodDisruptionBudget
	scaledObject   *scaledObject
	serviceMonitor *serviceMonitor
	savepointJob   *batchv1.Job
}

// required are the values without which the chart refuses to render.
func required() map[string]any {
	return map[string]any{
		"kafka":       map[string]any{"brokers": []any{"kafka-0.kafka:9092", "kafka-1.kafka:9092"}},
		"checkpoints": map[string]any{"s3": map[string]any{"bucket": "ckpt", "existingSecret": "s3-keys"}},
	}
}

// merge sets the values of over onto base, map by map.
func merge(base, over map[string]any) map[string]any {
	for k, v := range over {
		if m, ok := v.(map[string]any); ok {
			if b, ok := base[k].(map[string]any); ok {
				base[k] = merge(b, m)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// render renders the chart as `helm install job deploy/helm/splitflow
// --namespace streams` would with vals, offline (no lookup reaches a
// cluster).
func render(vals map[string]any) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "job", Namespace: "streams", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// renderOK renders and decodes every manifest strictly into its
// Kubernetes type: an unknown field, a wrong type or a duplicate key
// fails the test.
func renderOK(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	files, err := render(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var r rendered
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if path.Ext(name) != ".yaml" {
			continue // NOTES.txt, _helpers.tpl
		}
		for i, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var head metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s (document %d): %v\n%s", name, i, err, doc)
			}
			var into any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				r.deployment = &appsv1.Deployment{}
				into = r.deployment
			case "v1 Service":
				r.service = &corev1.Service{}
				into = r.service
			case "v1 ServiceAccount":
				r.serviceAccount = &corev1.ServiceAccount{}
				into = r.serviceAccount
			case "policy/v1 PodDisruptionBudget":
				r.pdb = &policyv1.PodDisruptionBudget{}
				into = r.pdb
			case "keda.sh/v1alpha1 ScaledObject":
				r.scaledObject = &scaledObject{}
				into = r.scaledObject
			case "monitoring.coreos.com/v1 ServiceMonitor":
				r.serviceMonitor = &serviceMonitor{}
				into = r.serviceMonitor
			case "batch/v1 Job":
				r.savepointJob = &batchv1.Job{}
				into = r.savepointJob
			default:
				t.Fatalf("%s: a %s %s, which this test does not decode: add it", name, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: not a valid %s: %v\n%s", name, head.Kind, err, doc)
			}
		}
	}
	if r.deployment == nil {
		t.Fatal("no Deployment rendered")
	}
	return r
}

// container is the Deployment's one container.
func container(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want the job's alone", n)
	}
	return d.Spec.Template.Spec.Containers[0]
}

// flagValues are the container's --name=value arguments by name; a flag
// without a value maps to "".
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, dup := m[name]; dup {
			t.Errorf("--%s given twice", name)
		}
		m[name] = v
	}
	return m
}

// The defaults run the job distributed: a Deployment (the processes are
// interchangeable: no StatefulSet) updated one ready process at a time,
// its args the distributed job's flags, checkpoints on S3, the pebble
// state in an emptyDir mounted where --state-dir points, probes on the
// status server's port, a grace period longer than a checkpoint, a
// disruption budget and scraping annotations over the same pods.
func TestChartRendersADistributedJob(t *testing.T) {
	r := renderOK(t, required())
	d := r.deployment
	spec := d.Spec.Template.Spec
	c := container(t, d)
	args := flagValues(t, c.Args)

	for name, want := range map[string]string{
		"distributed": "", "job-name": "wordcount", "slots": "16",
		"brokers":        "kafka-0.kafka:9092,kafka-1.kafka:9092",
		"checkpoint-dir": "s3://ckpt/splitflow", "checkpoint-interval": "10s",
		"state-backend": "pebble", "source-group-id": "wordcount.source",
	} {
		if got, ok := args[name]; !ok || got != want {
			t.Errorf("--%s=%q, want %q (present %v)", name, got, want, ok)
		}
	}
	if _, ok := args["parallelism"]; ok {
		t.Error("--parallelism rendered: a distributed job refuses it, its parallelism is --slots")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}

	// Rolling update, never below the running processes.
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable == nil ||
		s.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy %+v, want RollingUpdate with maxUnavailable 0", s)
	}

	// A stopping process finishes its slots' final checkpoints first.
	interval, err := time.ParseDuration(args["checkpoint-interval"])
	if err != nil {
		t.Fatal(err)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 60 || time.Duration(*g)*time.Second <= 2*interval {
		t.Errorf("terminationGracePeriodSeconds %v, want the documented 60, longer than a checkpoint", g)
	}

	// Probes on the port --http listens on.
	_, httpPort, err := splitHostPort(args["http"])
	if err != nil {
		t.Fatalf("--http %q: %v", args["http"], err)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", pr.name)
			continue
		}
		g := pr.probe.HTTPGet
		port := g.Port.IntVal
		if g.Port.StrVal != "" {
			port = ports[g.Port.StrVal]
		}
		if g.Path != pr.path || port != httpPort {
			t.Errorf("%s probe GET %s on port %v (%d), want %s on --http's port %d", pr.name, g.Path, g.Port.String(), port, pr.path, httpPort)
		}
	}

	// The pebble state: an emptyDir mounted at --state-dir.
	mountOf := map[string]string{}
	for _, m := range c.VolumeMounts {
		mountOf[m.MountPath] = m.Name
	}
	vol, ok := mountOf[args["state-dir"]]
	if args["state-dir"] == "" || !ok {
		t.Fatalf("--state-dir %q is not a volume's mount (mounts %v)", args["state-dir"], mountOf)
	}
	for _, v := range spec.Volumes {
		if v.Name == vol && v.EmptyDir == nil {
			t.Errorf("the state volume %q is not an emptyDir: %+v", vol, v.VolumeSource)
		}
	}

	// Non-root, read-only root: what the image allows.
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod does not require a non-root user")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the container's root file system is writable")
	}

	// The budget, the Service and the scraping annotations cover the
	// Deployment's pods, on the status server's port.
	podLabels := d.Spec.Template.Labels
	if r.pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if mu := r.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", mu)
	}
	for what, sel := range map[string]map[string]string{
		"PodDisruptionBudget": r.pdb.Spec.Selector.MatchLabels, "Deployment": d.Spec.Selector.MatchLabels, "Service": r.service.Spec.Selector,
	} {
		if len(sel) == 0 {
			t.Errorf("%s selects every pod", what)
		}
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods lack (%v)", what, k, v, podLabels)
			}
		}
	}
	a := d.Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/port"] != strconv.Itoa(int(httpPort)) {
		t.Errorf("scrape annotations %v, want /metrics on port %d", a, httpPort)
	}
	if r.serviceMonitor != nil || r.scaledObject != nil {
		t.Error("a ServiceMonitor or a ScaledObject rendered by default")
	}
	// The Service's names are hosts the status server answers to.
	hosts := strings.Split(args["http-allowed-hosts"], ",")
	for _, h := range []string{r.service.Name, r.service.Name + ".streams.svc"} {
		if !slices.Contains(hosts, h) {
			t.Errorf("--http-allowed-hosts %v lacks the Service's name %s", hosts, h)
		}
	}
}

// splitHostPort is net.SplitHostPort with the port as a number.
func splitHostPort(hostport string) (string, int32, error) {
	i := strings.LastIndex(hostport, ":")
	if i < 0 {
		return "", 0, fmt.Errorf("no port")
	}
	p, err := strconv.ParseInt(hostport[i+1:], 10, 32)
	return hostport[:i], int32(p), err
}

// allOn are values that render every optional argument and object.
func allOn() map[string]any {
	return merge(required(), map[string]any{
		"job": map[string]any{
			"savepointDir":  "s3://ckpt/savepoints",
			"fromSavepoint": "s3://ckpt/savepoints/savepoint-7-20261206T101500Z",
			"extraArgs":     []any{"--input-topic=lines", "--output-topic=counts", "--no-broker-timeout-check"},
		},
		"upgradeSavepoint": map[string]any{
			"enabled": true,
		},
		"checkpoints": map[string]any{"s3": map[string]any{"endpoint": "http://minio.storage:9000"}},
		"kafka": map[string]any{
			"tls":  map[string]any{"enabled": true, "existingSecret": "kafka-ca", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "tls.key", "serverName": "kafka"},
			"sasl": map[string]any{"mechanism": "SCRAM-SHA-512", "existingSecret": "kafka-user"},
		},
		"http":         map[string]any{"tokenSecret": "status-token"},
		"metrics":      map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
		"autoscaling":  map[string]any{"keda": map[string]any{"enabled": true, "topic": "lines", "authenticationRef": "kafka-auth"}},
		"stateVolume":  map[string]any{"sizeLimit": "10Gi"},
		"replicaCount": 3,
	})
}

// Every flag the chart renders is one the program accepts: the image's
// default program, wordcount, lists it in --help. (Its own flags come
// from job.extraArgs, the common ones from package jobflag.)
func TestChartArgsAreFlagsOfTheProgram(t *testing.T) {
	out, _ := exec.Command(staticBinaries(t)+"/wordcount", "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-(\S+)`).FindAllStringSubmatch(string(out), -1) {
		known[m[1]] = true
	}
	if !known["distributed"] || !known["input-topic"] {
		t.Fatalf("wordcount --help lists no --distributed or --input-topic:\n%s", out)
	}
	for what, vals := range map[string]map[string]any{"defaults": required(), "every option": allOn(),
		"oauth": merge(required(), map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "OAUTHBEARER", "existingSecret": "kafka-token"}}})} {
		c := container(t, renderOK(t, vals).deployment)
		if len(c.Command) != 0 {
			t.Errorf("%s: command %q replaces the image's entrypoint, the program", what, c.Command)
		}
		for name := range flagValues(t, c.Args) {
			if !known[name] {
				t.Errorf("%s: --%s is no flag of wordcount (its --help lists %d)", what, name, len(known))
			}
		}
	}
}

// Secrets come from Kubernetes Secrets named in the values, as
// environment variables or mounted files, never in the args: the S3 keys,
// the SASL user and password, the TLS files and the status server's
// token.
func TestChartTakesSecretsFromSecrets(t *testing.T) {
	r := renderOK(t, allOn())
	c := container(t, r.deployment)
	args := flagValues(t, c.Args)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, ref := range map[string][2]string{
		"AWS_ACCESS_KEY_ID":             {"s3-keys", "AWS_ACCESS_KEY_ID"},
		"AWS_SECRET_ACCESS_KEY":         {"s3-keys", "AWS_SECRET_ACCESS_KEY"},
		"SPLITFLOW_KAFKA_SASL_USER":     {"kafka-user", "username"},
		"SPLITFLOW_KAFKA_SASL_PASSWORD": {"kafka-user", "password"},
		"SPLITFLOW_HTTP_TOKEN":          {"status-token", "token"},
	} {
		e, ok := env[name]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: %+v, want a secretKeyRef", name, e)
			continue
		}
		if s := e.ValueFrom.SecretKeyRef; s.Name != ref[0] || s.Key != ref[1] {
			t.Errorf("%s from secret %s key %s, want %s key %s", name, s.Name, s.Key, ref[0], ref[1])
		}
	}
	if env["AWS_ENDPOINT_URL"].Value != "http://minio.storage:9000" || env["AWS_REGION"].Value != "us-east-1" {
		t.Errorf("S3 endpoint %q region %q", env["AWS_ENDPOINT_URL"].Value, env["AWS_REGION"].Value)
	}
	if args["kafka-sasl-mechanism"] != "SCRAM-SHA-512" {
		t.Errorf("--kafka-sasl-mechanism %q", args["kafka-sasl-mechanism"])
	}

	// The TLS files lie in the Secret's volume.
	var tlsMount string
	for _, m := range c.VolumeMounts {
		for _, v := range r.deployment.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "kafka-ca" {
				tlsMount = m.MountPath
			}
		}
	}
	if tlsMount == "" {
		t.Fatal("the Secret kafka-ca is not mounted")
	}
	for flag, key := range map[string]string{"kafka-tls-ca": "ca.crt", "kafka-tls-cert": "tls.crt", "kafka-tls-key": "tls.key"} {
		if args[flag] != tlsMount+"/"+key {
			t.Errorf("--%s=%q, want %s/%s", flag, args[flag], tlsMount, key)
		}
	}
	if _, ok := args["kafka-tls"]; !ok {
		t.Error("no --kafka-tls")
	}

	// OAUTHBEARER: the token is a file of the mounted Secret.
	r = renderOK(t, merge(required(), map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "OAUTHBEARER", "existingSecret": "kafka-token"}}}))
	c = container(t, r.deployment)
	args = flagValues(t, c.Args)
	var tokenDir string
	for _, m := range c.VolumeMounts {
		for _, v := range r.deployment.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "kafka-token" {
				tokenDir = m.MountPath
			}
		}
	}
	if tokenDir == "" || args["kafka-sasl-token-file"] != tokenDir+"/token" {
		t.Errorf("--kafka-sasl-token-file=%q, the Secret kafka-token mounted at %q", args["kafka-sasl-token-file"], tokenDir)
	}
}

// Values the job cannot run with fail the rendering, naming the value.
func TestChartRefusesValuesTheJobCannotRunWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"no brokers", map[string]any{"checkpoints": map[string]any{"s3": map[string]any{"bucket": "ckpt"}}}, "kafka.brokers is required"},
		{"no bucket", map[string]any{"kafka": map[string]any{"brokers": []any{"kafka:9092"}}}, "checkpoints.s3.bucket is required"},
		{"sources in the job's group", merge(required(), map[string]any{"job": map[string]any{"sourceGroupId": "wordcount"}}), "job.sourceGroupId \"wordcount\" is the job's own consumer group"},
		{"SASL without a secret", merge(required(), map[string]any{"kafka": map[string]any{"sasl": map[string]any{"mechanism": "PLAIN"}}}), "kafka.sasl.mechanism PLAIN needs kafka.sasl.existingSecret"},
		{"KEDA above the slots", merge(required(), map[string]any{"job": map[string]any{"slots": 4}, "autoscaling": map[string]any{"keda": map[string]any{"enabled": true, "maxReplicas": 5}}}),
			"autoscaling.keda.maxReplicas (5) must not exceed job.slots (4)"},
		{"KEDA at the slots", merge(required(), map[string]any{"job": map[string]any{"slots": 4}, "autoscaling": map[string]any{"keda": map[string]any{"enabled": true, "maxReplicas": 4}}}),
			"autoscaling.keda.maxReplicas (4) must not exceed job.slots (4) less rollingUpdate.maxSurge (1)"},
		{"a process per slot", merge(required(), map[string]any{"job": map[string]any{"slots": 4}, "replicaCount": 4}),
			"replicaCount (4) must not exceed job.slots (4) less rollingUpdate.maxSurge (1)"},
		{"more surge than slots", merge(required(), map[string]any{"job": map[string]any{"slots": 2}, "replicaCount": 1, "rollingUpdate": map[string]any{"maxSurge": 2}}),
			"job.slots (2) leaves no room for rollingUpdate.maxSurge (2)"},
		{"no surge", merge(required(), map[string]any{"rollingUpdate": map[string]any{"maxSurge": 0}}), "rollingUpdate.maxSurge must be a number of processes, 1 or more"},
		{"KEDA to zero", merge(required(), map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"enabled": true, "minReplicas": 0}}}), "autoscaling.keda.minReplicas must be 1 or more"},
		{"KEDA without offsets", merge(required(), map[string]any{"job": map[string]any{"commitSourceOffsets": false}, "autoscaling": map[string]any{"keda": map[string]any{"enabled": true}}}), "autoscaling.keda needs job.commitSourceOffsets"},
		{"KEDA on an unknown trigger", merge(required(), map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"enabled": true, "trigger": "cpu"}}}), "autoscaling.keda.trigger must be kafka or prometheus"},
		{"KEDA on Prometheus without a server", merge(required(), map[string]any{"autoscaling": map[string]any{"keda": map[string]any{"enabled": true, "trigger": "prometheus"}}}), "autoscaling.keda.prometheus.serverAddress is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// KEDA scales the Deployment on the lag of the group the sources commit
// to (the Deployment's --source-group-id), between 1 and the slot count
// less the rolling update's surge (so that every process of an update
// gets a slot), slowly down; the Deployment then leaves its replica count
// to KEDA.
func TestKEDAScalesOnTheSourcesGroupWithinTheSlots(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keda      map[string]any
		job       map[string]any
		wantMax   int32
		wantGroup string
	}{
		{"max defaults to slots less surge", map[string]any{}, map[string]any{"slots": 6}, 5, "wordcount.source"},
		{"max below that", map[string]any{"maxReplicas": 4, "minReplicas": 2}, map[string]any{"slots": 8, "sourceGroupId": "wc-lag"}, 4, "wc-lag"},
		{"max at slots less surge", map[string]any{"maxReplicas": 7}, map[string]any{"slots": 8, "name": "orders"}, 7, "orders.source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keda := merge(map[string]any{"enabled": true}, tc.keda)
			r := renderOK(t, merge(required(), map[string]any{"job": tc.job, "autoscaling": map[string]any{"keda": keda}}))
			so := r.scaledObject
			if so == nil {
				t.Fatal("no ScaledObject")
			}
			args := flagValues(t, container(t, r.deployment).Args)
			slots, _ := strconv.Atoi(args["slots"])
			if ref := so.Spec.ScaleTargetRef; ref == nil || ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != r.deployment.Name {
				t.Errorf("scales %+v, want the apps/v1 Deployment %s", ref, r.deployment.Name)
			}
			surge := r.deployment.Spec.Strategy.RollingUpdate.MaxSurge.IntValue()
			if mx := so.Spec.MaxReplicaCount; mx == nil || *mx != tc.wantMax || int(*mx) > slots-surge {
				t.Errorf("maxReplicaCount %v, want %d, at most --slots %d less maxSurge %d", mx, tc.wantMax, slots, surge)
			}
			if mn := so.Spec.MinReplicaCount; mn == nil || *mn < 1 || (so.Spec.MaxReplicaCount != nil && *mn > *so.Spec.MaxReplicaCount) {
				t.Errorf("minReplicaCount %v, want 1 or more and at most maxReplicaCount (KEDA's CRD refuses more)", mn)
			}
			var down *autoscalingv2.HPAScalingRules
			if a := so.Spec.Advanced; a != nil && a.HorizontalPodAutoscalerConfig != nil && a.HorizontalPodAutoscalerConfig.Behavior != nil {
				down = a.HorizontalPodAutoscalerConfig.Behavior.ScaleDown
			}
			if down == nil || down.StabilizationWindowSeconds == nil || *down.StabilizationWindowSeconds < 300 {
				t.Errorf("scale-down rules %+v, want a stabilization window of 300s or more so slots do not bounce", down)
			}
			if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
				t.Fatalf("triggers %+v, want one kafka trigger", so.Spec.Triggers)
			}
			md := so.Spec.Triggers[0].Metadata
			if md["consumerGroup"] != tc.wantGroup || md["consumerGroup"] != args["source-group-id"] {
				t.Errorf("lag of group %q; the sources commit to --source-group-id=%q, want %q", md["consumerGroup"], args["source-group-id"], tc.wantGroup)
			}
			if md["bootstrapServers"] != args["brokers"] {
				t.Errorf("bootstrapServers %q, --brokers %q", md["bootstrapServers"], args["brokers"])
			}
			if r.deployment.Spec.Replicas != nil {
				t.Errorf("replicas %d set beside KEDA: every upgrade would reset what KEDA chose", *r.deployment.Spec.Replicas)
			}
		})
	}
}

// With trigger prometheus, KEDA scales on the job's own lag gauge summed
// over its processes: the query sums splitflow_source_lag_records of the
// job the Deployment runs (job_name is its --job-name) in the release's
// namespace, with the chart's thresholds, and an empty answer is KEDA's
// error rather than a lag of 0. The sources then need not commit offsets.
func TestKEDAPrometheusTriggerSumsTheJobsLagGauge(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		job         map[string]any
		want        string
	}{
		{"default query", "", map[string]any{"name": "orders", "commitSourceOffsets": false},
			`sum(splitflow_source_lag_records{namespace="streams",job_name="orders"})`},
		{"own query", `sum(splitflow_source_lag_records{job_name="orders",cluster="eu"})`, map[string]any{"name": "orders"},
			`sum(splitflow_source_lag_records{job_name="orders",cluster="eu"})`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := map[string]any{"enabled": true, "trigger": "prometheus", "lagThreshold": "5000", "activationLagThreshold": "100",
				"prometheus": map[string]any{"serverAddress": "http://prometheus-operated.monitoring:9090", "query": tc.query}}
			r := renderOK(t, merge(required(), map[string]any{"job": tc.job, "autoscaling": map[string]any{"keda": k}}))
			so := r.scaledObject
			if so == nil {
				t.Fatal("no ScaledObject")
			}
			if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "prometheus" {
				t.Fatalf("triggers %+v, want one prometheus trigger", so.Spec.Triggers)
			}
			md := so.Spec.Triggers[0].Metadata
			if md["query"] != tc.want {
				t.Errorf("query %q, want %q", md["query"], tc.want)
			}
			args := flagValues(t, container(t, r.deployment).Args)
			if !strings.Contains(md["query"], `job_name="`+args["job-name"]+`"`) {
				t.Errorf("query %q does not select the job the Deployment runs (--job-name=%s)", md["query"], args["job-name"])
			}
			want := map[string]string{"serverAddress": "http://prometheus-operated.monitoring:9090", "threshold": "5000", "activationThreshold": "100", "ignoreNullValues": "false"}
			for k, v := range want {
				if md[k] != v {
					t.Errorf("metadata %s %q, want %q", k, md[k], v)
				}
			}
			if _, ok := md["consumerGroup"]; ok {
				t.Errorf("the prometheus trigger has the Kafka scaler's consumerGroup: %v", md)
			}
		})
	}
}

// The optional ServiceMonitor scrapes the Service's status port at
// /metrics.
func TestServiceMonitorScrapesTheStatusPort(t *testing.T) {
	r := renderOK(t, allOn())
	sm := r.serviceMonitor
	if sm == nil {
		t.Fatal("no ServiceMonitor with metrics.serviceMonitor.enabled")
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Port != r.service.Spec.Ports[0].Name {
		t.Errorf("endpoints %+v, want /metrics on the Service's port %q", sm.Spec.Endpoints, r.service.Spec.Ports[0].Name)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if r.service.Labels[k] != v {
			t.Errorf("selects Services with %s=%s; the chart's Service has %v", k, v, r.service.Labels)
		}
	}
}

// The chart's README has a row for every value of values.yaml: the
// value's path, one of its parents' (readinessProbe, resources), or its
// name in a row about its siblings (`kafka.tls.caKey`, `certKey`).
func TestChartREADMEListsEveryValue(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(chartDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| `") {
			rows = append(rows, l)
		}
	}
	var paths []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(prefix+k+".", sub)
				continue
			}
			paths = append(paths, prefix+k)
		}
	}
	walk("", vals)
	sort.Strings(paths)
	for _, p := range paths {
		documented := false
		parent, last := "", p
		if i := strings.LastIndex(p, "."); i >= 0 {
			parent, last = p[:i], p[i+1:]
		}
		for _, row := range rows {
			first := strings.SplitN(row, "`", 3)[1]
			switch {
			case strings.Contains(row, "`"+p+"`"),
				parent != "" && strings.Contains(row, "`"+last+"`") && strings.HasPrefix(first, parent+"."):
				documented = true
			}
			for q := p; !documented && strings.Contains(q, "."); {
				q = q[:strings.LastIndex(q, ".")]
				documented = strings.Contains(row, "`"+q+"`")
			}
		}
		if !documented {
			t.Errorf("values.yaml's %s has no row in the chart's README", p)
		}
	}
}

// Every top-level value of values.yaml has a comment: above it, or above
// the run of keys it belongs to (livenessProbe after readinessProbe).
func TestEveryTopLevelValueIsCommented(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	topKey := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*:`)
	for i, l := range lines {
		if !topKey.MatchString(l) {
			continue
		}
		commented := false
		for j := i - 1; j >= 0 && strings.TrimSpace(lines[j]) != "" && !commented; j-- {
			commented = strings.HasPrefix(lines[j], "#")
		}
		if !commented {
			t.Errorf("values.yaml:%d: %s has no comment", i+1, strings.TrimSuffix(topKey.FindString(l), ":"))
		}
	}
}

// upgradeSavepoint renders a pre-upgrade hook Job that stops the running
// job with one savepoint of every slot before the upgrade changes
// anything: the image's CLI, `splitflow savepoint stop --yes` for the job
// (its old name when given), on the job's brokers and checkpoint root
// with the job's Kafka and S3 settings, never retried (a failure fails
// the upgrade), every flag one the CLI accepts. Off by default.
func TestUpgradeSavepointHookStopsTheJobBeforeTheUpgrade(t *testing.T) {
	if r := renderOK(t, required()); r.savepointJob != nil {
		t.Fatal("a savepoint hook by default")
	}
	r := renderOK(t, allOn())
	j := r.savepointJob
	if j == nil {
		t.Fatal("no savepoint hook with upgradeSavepoint.enabled")
	}
	if got := j.Annotations["helm.sh/hook"]; got != "pre-upgrade" {
		t.Errorf("helm.sh/hook %q; want pre-upgrade", got)
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("backoffLimit %v, restartPolicy %s; want one try: a failed savepoint fails the upgrade", j.Spec.BackoffLimit, j.Spec.Template.Spec.RestartPolicy)
	}
	sel, err := metav1.LabelSelectorAsSelector(r.deployment.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Matches(labels.Set(j.Spec.Template.Labels)) {
		t.Errorf("the hook's pod labels %v match the job's selector %v: the Service and the disruption budget would count it", j.Spec.Template.Labels, sel)
	}
	c := j.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/splitflow"}) || len(c.Args) < 2 || c.Args[0] != "savepoint" || c.Args[1] != "stop" {
		t.Fatalf("command %v args %v; want the CLI's savepoint stop", c.Command, c.Args)
	}
	f := flagValues(t, c.Args)
	for name, want := range map[string]string{
		"job": "wordcount", "brokers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "checkpoint-dir": "s3://ckpt/splitflow",
		"target": "s3://ckpt/savepoints", "timeout": "10m", "yes": "", "kafka-tls": "", "kafka-tls-ca": "/etc/splitflow/kafka-tls/ca.crt",
		"kafka-sasl-mechanism": "SCRAM-SHA-512",
	} {
		if got, ok := f[name]; !ok || got != want {
			t.Errorf("--%s=%q (given: %v); want %q", name, got, ok, want)
		}
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, name := range []string{"AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "SPLITFLOW_KAFKA_SASL_USER", "SPLITFLOW_KAFKA_SASL_PASSWORD"} {
		if !env[name] {
			t.Errorf("no %s in the hook's environment", name)
		}
	}
	out, _ := exec.Command(staticBinaries(t)+"/splitflow", "savepoint", "stop", "--job", "x", "-h").CombinedOutput()
	for name := range f {
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `\b`).Match(out) {
			t.Errorf("--%s is no flag of splitflow savepoint stop --job:\n%s", name, out)
		}
	}
	renamed := renderOK(t, merge(allOn(), map[string]any{"job": map[string]any{"name": "wc2"}, "upgradeSavepoint": map[string]any{"jobName": "wc", "target": "s3://sp/x"}}))
	f = flagValues(t, renamed.savepointJob.Spec.Template.Spec.Containers[0].Args)
	if f["job"] != "wc" || f["target"] != "s3://sp/x" {
		t.Errorf("renamed: --job=%s --target=%s; want the old name wc and the given target", f["job"], f["target"])
	}
}
