//! gRPC calls a delivery, read from the servers' `/metrics` before and after a run: how
//! many calls each hop made for each delivery shows how well it batched (a `SendBatch` a
//! delivery is a batch of one send; 0.01 is a hundred).

use std::{collections::BTreeMap, time::Duration};

use serde::Serialize;

/// How long reading one page may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The calls to one method during a run, a delivery.
#[derive(Debug, Clone, Serialize)]
pub struct Calls {
    /// The method's name, without its service (`SendBatch`).
    pub method: String,
    pub per_delivery: f64,
}

/// Calls served so far by method, summed over `urls` (`imesh_grpc_requests_total`, every
/// status code counted).
pub(super) async fn served(urls: &[String]) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut total = BTreeMap::new();
    if urls.is_empty() {
        return Ok(total);
    }
    let client = imesh_kit::hooks::http_client("--metrics", "", SCRAPE_TIMEOUT)?;
    for url in urls {
        let page = async {
            client
                .get(url)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await
        };
        let text = page
            .await
            .map_err(|e| anyhow::anyhow!("--metrics {url}: {e}"))?;
        for (method, calls) in counters(&text) {
            *total.entry(method).or_default() += calls;
        }
    }
    Ok(total)
}

/// The methods called between `before` and `after`, most calls first, a delivery.
pub(super) fn per_delivery(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    deliveries: u64,
) -> Vec<Calls> {
    let mut calls: Vec<(u64, &str)> = after
        .iter()
        .map(|(method, n)| {
            let then = before.get(method).copied().unwrap_or(0);
            (n.saturating_sub(then), method.as_str())
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    calls.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    calls
        .into_iter()
        .map(|(n, method)| Calls {
            method: method.to_owned(),
            per_delivery: n as f64 / deliveries.max(1) as f64,
        })
        .collect()
}

/// `(method, count)` of each `imesh_grpc_requests_total` sample in a Prometheus text page;
/// the method without its service.
fn counters(text: &str) -> impl Iterator<Item = (String, u64)> + '_ {
    text.lines().filter_map(|line| {
        let labels = line.strip_prefix("imesh_grpc_requests_total{")?;
        let (labels, value) = labels.rsplit_once("} ")?;
        let path = labels.split("method=\"").nth(1)?.split('"').next()?;
        let method = path.rsplit('/').next()?;
        Some((method.to_owned(), value.trim().parse::<f64>().ok()? as u64))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
# TYPE imesh_grpc_requests_total counter
imesh_grpc_requests_total{service=\"message-svc\",method=\"/imesh.message.v1.MessageService/SendBatch\",code=\"Ok\"} 20
imesh_grpc_requests_total{service=\"message-svc\",method=\"/imesh.message.v1.MessageService/SendBatch\",code=\"Unavailable\"} 2
imesh_grpc_requests_total{service=\"gateway\",method=\"/imesh.gateway.v1.GatewayService/Push\",code=\"Ok\"} 7
imesh_grpc_request_duration_seconds_count{service=\"gateway\",method=\"/imesh.gateway.v1.GatewayService/Push\"} 7
";

    #[test]
    fn counters_sum_every_status_of_a_method() {
        let mut total: BTreeMap<String, u64> = BTreeMap::new();
        for (method, n) in counters(PAGE) {
            *total.entry(method).or_default() += n;
        }
        assert_eq!(
            total.into_iter().collect::<Vec<_>>(),
            [("Push".to_owned(), 7), ("SendBatch".to_owned(), 22)]
        );
    }

    #[test]
    fn per_delivery_counts_only_the_runs_calls_most_first() {
        let before = BTreeMap::from([("SendBatch".to_owned(), 10), ("Push".to_owned(), 5)]);
        let after = BTreeMap::from([
            ("SendBatch".to_owned(), 30),
            ("Push".to_owned(), 5),
            ("Append".to_owned(), 40),
        ]);
        let calls = per_delivery(&before, &after, 80);
        let calls: Vec<(&str, f64)> = calls
            .iter()
            .map(|c| (c.method.as_str(), c.per_delivery))
            .collect();
        assert_eq!(calls, [("Append", 0.5), ("SendBatch", 0.25)]);
    }
}
