//! Prometheus metrics (text exposition via `prometheus-client`): tool calls by tool and
//! outcome, tool latency histograms by tool, HTTP requests by endpoint and status.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub tool: String,
    /// `ok`, `invalid_input`, `not_found`, `error`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabel {
    pub tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub endpoint: String,
    pub status: u16,
}

type HistogramFamily = Family<ToolLabel, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s
    Histogram::new(exponential_buckets(0.00005, 2.0, 16))
}

/// All metrics of one server process.
pub struct Metrics {
    registry: Registry,
    pub calls: Family<CallLabels, Counter>,
    pub latency: HistogramFamily,
    pub http: Family<HttpLabels, Counter>,
    pub generation: Gauge,
    pub live_chunks: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Tool names used as label values: known tools as themselves, anything else as `unknown`
/// (bounded cardinality).
pub fn tool_label(name: &str) -> String {
    if engine::catalog::find(name).is_some() {
        name.to_string()
    } else {
        "unknown".to_string()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        let latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let http = Family::<HttpLabels, Counter>::default();
        let generation = Gauge::default();
        let live_chunks = Gauge::default();
        registry.register(
            "queryd_tool_calls",
            "MCP tool calls by tool and outcome",
            calls.clone(),
        );
        registry.register(
            "queryd_tool_latency_seconds",
            "MCP tool call latency by tool",
            latency.clone(),
        );
        registry.register(
            "queryd_http_requests",
            "HTTP requests by endpoint and status",
            http.clone(),
        );
        registry.register(
            "queryd_index_generation",
            "Index generation being served",
            generation.clone(),
        );
        registry.register(
            "queryd_index_live_chunks",
            "Live chunks in the served index",
            live_chunks.clone(),
        );
        Metrics {
            registry,
            calls,
            latency,
            http,
            generation,
            live_chunks,
        }
    }

    pub fn record_call(&self, tool: &str, outcome: &str, took: Duration) {
        let tool = tool_label(tool);
        self.calls
            .get_or_create(&CallLabels {
                tool: tool.clone(),
                outcome: outcome.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&ToolLabel { tool })
            .observe(took.as_secs_f64());
    }

    pub fn record_http(&self, endpoint: &str, status: u16) {
        self.http
            .get_or_create(&HttpLabels {
                endpoint: endpoint.to_string(),
                status,
            })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry)
            .expect("writing to a String cannot fail");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_counts_and_histograms() {
        let m = Metrics::new();
        m.record_call("search_code", "ok", Duration::from_millis(2));
        m.record_call("no_such_tool", "invalid_input", Duration::from_micros(10));
        m.record_http("/mcp", 200);
        let s = m.encode();
        assert!(
            s.contains("queryd_tool_calls_total{tool=\"search_code\",outcome=\"ok\"} 1"),
            "{s}"
        );
        assert!(s.contains("tool=\"unknown\""), "{s}");
        assert!(s.contains("queryd_tool_latency_seconds_bucket"), "{s}");
        assert!(
            s.contains("queryd_http_requests_total{endpoint=\"/mcp\",status=\"200\"} 1"),
            "{s}"
        );
        assert!(s.ends_with("# EOF\n"));
    }
}
