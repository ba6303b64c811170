//! The browser demo at `/`: a page in plain TypeScript (`web/`, built into `web/dist`)
//! over the `imesh.json` WebSocket frames. The files are compiled into the binary.

use axum::{
    Router,
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};

/// What the page may load: itself, the WebSocket, and images and uploads anywhere (an S3
/// bucket has an origin of its own).
const POLICY: &str = "default-src 'self'; img-src 'self' blob: http: https:; \
    connect-src 'self' ws: wss: http: https:; object-src 'none'; base-uri 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}

pub fn router() -> Router {
    const HTML: &str = "text/html; charset=utf-8";
    const JS: &str = "text/javascript; charset=utf-8";
    Router::new()
        .route(
            "/",
            get(|| async { asset(HTML, include_str!("../../web/index.html")) }),
        )
        .route(
            "/app.js",
            get(|| async { asset(JS, include_str!("../../web/dist/app.js")) }),
        )
        .route(
            "/frames.js",
            get(|| async { asset(JS, include_str!("../../web/dist/frames.js")) }),
        )
        .route(
            "/style.css",
            get(|| async {
                asset(
                    "text/css; charset=utf-8",
                    include_str!("../../web/style.css"),
                )
            }),
        )
}
