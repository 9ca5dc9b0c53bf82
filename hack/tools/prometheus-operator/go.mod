// Not built: the chart tests read the PodMonitor and PrometheusRule CRDs from this module's
// download (example/prometheus-operator-crd/) to validate the chart's monitoring objects on the
// real control plane (tests/chart). Pinned here, verified by go.sum; nothing of it is committed.
module github.com/cdtarget/cdtarget/hack/tools/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
