// Package deploy holds what runs splitflow on Kubernetes, checked without
// a cluster or a Docker engine: the image's Dockerfile (at the repository
// root) and the Helm chart (helm/splitflow). Its tests render the chart
// with Helm's own packages, decode each manifest strictly into the
// Kubernetes API types (KEDA's ScaledObject into a copy of its types) and
// run Helm's linter over the chart.
//
// It is a module of its own so that Helm's and Kubernetes' many modules
// stay out of the main module's go.mod: its users never download them.
package deploy
