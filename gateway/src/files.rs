//! The embedded file store's HTTP side (on when `files_dir` is set): `PUT` and `GET
//! /files/<key>` with the links message-svc signs (`imesh_kit::files`). An upload must
//! carry exactly the signed type and length, goes to a temporary file and is linked into
//! place whole; an object is written once. A download streams the file as the signed
//! type; only images, audio and video are shown inline, everything else is an attachment.

use std::{path::PathBuf, sync::Arc};

use axum::{
    Router,
    body::Body,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::put,
};
use futures::StreamExt;
use imesh_kit::{
    config::Secret,
    files::{Access, Link, LinkSigner},
};
use tokio::io::AsyncWriteExt;

struct Store {
    dir: PathBuf,
    signer: LinkSigner,
}

#[derive(serde::Deserialize)]
struct Signed {
    expires: i64,
    size: i64,
    #[serde(rename = "type")]
    mime: String,
    sig: String,
}

/// `/files/<key>` over the objects under `dir`, checked with the key of `internal_secret`.
pub fn router(dir: &str, internal_secret: &Secret) -> Router {
    let store = Store {
        dir: PathBuf::from(dir),
        signer: LinkSigner::new(internal_secret),
    };
    Router::new()
        .route("/files/{*key}", put(upload).get(download))
        .with_state(Arc::new(store))
}

/// A refused request's status and the reason its body says.
type Refusal = (StatusCode, String);

fn refuse(status: StatusCode, reason: impl Into<String>) -> Refusal {
    (status, reason.into())
}

impl Store {
    /// The link's check, as the answer to give when it fails.
    fn check(&self, access: Access, key: &str, signed: &Signed) -> Result<(), Refusal> {
        let link = Link {
            access,
            key,
            expires: signed.expires,
            size: signed.size,
            mime: &signed.mime,
        };
        let now = imesh_kit::ids::unix_ms() / 1000;
        self.signer
            .verify(&link, &signed.sig, now)
            .map_err(|refused| refuse(StatusCode::FORBIDDEN, refused.to_string()))
    }
}

async fn upload(
    State(store): State<Arc<Store>>,
    Path(key): Path<String>,
    Query(signed): Query<Signed>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, Refusal> {
    store.check(Access::Upload, &key, &signed)?;
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if header(header::CONTENT_TYPE) != Some(signed.mime.as_str()) {
        let reason = format!("content-type: must be {}", signed.mime);
        return Err(refuse(StatusCode::BAD_REQUEST, reason));
    }
    if header(header::CONTENT_LENGTH).and_then(|v| v.parse().ok()) != Some(signed.size) {
        let reason = format!("content-length: must be {}", signed.size);
        return Err(refuse(StatusCode::BAD_REQUEST, reason));
    }
    let path = store.dir.join(&key);
    if tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Err(uploaded_already());
    }
    let partial = path.with_extension(format!("part-{:016x}", rand_suffix()));
    if let Err(refused) = write(&partial, body, signed.size).await {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(refused);
    }
    // A link, unlike a rename, never replaces a file: of two PUTs racing to one key, one
    // is stored whole and the other is told it came second.
    let linked = tokio::fs::hard_link(&partial, &path).await;
    let _ = tokio::fs::remove_file(&partial).await;
    match linked {
        Ok(()) => Ok(StatusCode::CREATED),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(uploaded_already()),
        Err(e) => {
            tracing::error!(error = %e, key, "storing an upload failed");
            let reason = "storing the object failed";
            Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, reason))
        }
    }
}

fn uploaded_already() -> Refusal {
    refuse(StatusCode::CONFLICT, "the object is uploaded already")
}

/// A random file name suffix, so concurrent PUTs of one key never share a partial file.
fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// Writes `body` to `partial`, refusing more or fewer than `size` bytes.
async fn write(partial: &std::path::Path, body: Body, size: i64) -> Result<(), Refusal> {
    let failed = |e: std::io::Error| {
        tracing::error!(error = %e, "writing an upload failed");
        refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "storing the object failed",
        )
    };
    if let Some(dir) = partial.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(failed)?;
    }
    let mut file = tokio::fs::File::create(partial).await.map_err(failed)?;
    let mut stream = body.into_data_stream();
    let mut written = 0i64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| refuse(StatusCode::BAD_REQUEST, e.to_string()))?;
        written += chunk.len() as i64;
        if written > size {
            return Err(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "more bytes than signed",
            ));
        }
        file.write_all(&chunk).await.map_err(failed)?;
    }
    if written != size {
        return Err(refuse(StatusCode::BAD_REQUEST, "fewer bytes than signed"));
    }
    file.sync_all().await.map_err(failed)
}

async fn download(
    State(store): State<Arc<Store>>,
    Path(key): Path<String>,
    Query(signed): Query<Signed>,
) -> Result<Response, Refusal> {
    store.check(Access::Download, &key, &signed)?;
    let file = match tokio::fs::File::open(store.dir.join(&key)).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(StatusCode::NOT_FOUND, "no such object"));
        }
        Err(e) => {
            tracing::error!(error = %e, key, "reading an object failed");
            let reason = "reading the object failed";
            return Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, reason));
        }
    };
    let length = file.metadata().await.map(|m| m.len()).unwrap_or_default();
    let inline = ["image/", "audio/", "video/"]
        .iter()
        .any(|major| signed.mime.starts_with(major));
    let disposition = match inline {
        true => "inline",
        false => "attachment",
    };
    let fresh = (signed.expires - imesh_kit::ids::unix_ms() / 1000).max(0);
    let headers = [
        (header::CONTENT_TYPE, signed.mime),
        (header::CONTENT_LENGTH, length.to_string()),
        (header::CONTENT_DISPOSITION, disposition.to_string()),
        (header::CACHE_CONTROL, format!("private, max-age={fresh}")),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
    ];
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((headers, body).into_response())
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, Request};
    use tower::ServiceExt;

    use super::*;

    const KEY: &str = "5/00112233445566778899aabbccddeeff";

    fn secret() -> Secret {
        Secret::new("test-internal-secret-0123")
    }

    fn link(access: Access, size: i64, mime: &str, expires: i64) -> String {
        let link = Link {
            access,
            key: KEY,
            expires,
            size,
            mime,
        };
        let query = LinkSigner::new(&secret()).query(&link);
        let base = format!("http://gateway.test/files/{KEY}");
        let url = with_query(&base, &query);
        url.strip_prefix("http://gateway.test").unwrap().to_owned()
    }

    /// `base?k=v&…`, the one character of the values a query needs encoded (`/`) encoded.
    fn with_query(base: &str, query: &[(&str, String); 4]) -> String {
        let encoded: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", v.replace('/', "%2F")))
            .collect();
        format!("{base}?{}", encoded.join("&"))
    }

    fn later() -> i64 {
        imesh_kit::ids::unix_ms() / 1000 + 60
    }

    async fn call(
        dir: &std::path::Path,
        request: Request<Body>,
    ) -> (StatusCode, HeaderMap, Vec<u8>) {
        let router = router(&dir.display().to_string(), &secret());
        let answer = router.oneshot(request).await.unwrap();
        let (parts, body) = answer.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (parts.status, parts.headers, bytes.to_vec())
    }

    fn put(uri: &str, mime: &str, body: &'static [u8]) -> Request<Body> {
        Request::builder()
            .method(Method::PUT)
            .uri(uri)
            .header(header::CONTENT_TYPE, mime)
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))
            .unwrap()
    }

    fn get(uri: &str) -> Request<Body> {
        Request::builder().uri(uri).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn an_upload_takes_the_signed_type_and_length_once_and_serves_it_as_an_attachment() {
        let dir = std::env::temp_dir().join(format!("imesh-gateway-files-{}", rand_suffix()));
        let upload = link(Access::Upload, 5, "text/html", later());
        let (status, ..) = call(&dir, put(&upload, "image/png", b"<b>x")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "another type");
        let (status, ..) = call(&dir, put(&upload, "text/html", b"<b>")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "another length");
        let expired = link(Access::Upload, 5, "text/html", 1);
        let (status, ..) = call(&dir, put(&expired, "text/html", b"<b>x<")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "an expired link");
        let (status, ..) = call(&dir, put(&upload, "text/html", b"<b>x<")).await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, ..) = call(&dir, put(&upload, "text/html", b"<i>y<")).await;
        assert_eq!(status, StatusCode::CONFLICT, "written once");

        let download = link(Access::Download, 0, "text/html", later());
        let (status, headers, body) = call(&dir, get(&download)).await;
        assert_eq!(
            (status, body.as_slice()),
            (StatusCode::OK, b"<b>x<".as_slice())
        );
        assert_eq!(headers[header::CONTENT_DISPOSITION], "attachment");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let (status, ..) = call(&dir, get(&upload)).await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "an upload link does not download"
        );
        let other = download.replace(KEY, "5/ffffffffffffffffffffffffffffffff");
        let (status, ..) = call(&dir, get(&other)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "the signature names the key");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn of_two_uploads_racing_to_one_key_one_is_stored_whole() {
        let dir = std::env::temp_dir().join(format!("imesh-gateway-race-{}", rand_suffix()));
        let upload = link(Access::Upload, 4, "image/png", later());
        let ((first, ..), (second, ..)) = tokio::join!(
            call(&dir, put(&upload, "image/png", b"AAAA")),
            call(&dir, put(&upload, "image/png", b"BBBB")),
        );
        let mut statuses = [first, second];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
        let stored = std::fs::read(dir.join(KEY)).unwrap();
        let winner: &[u8] = if first == StatusCode::CREATED {
            b"AAAA"
        } else {
            b"BBBB"
        };
        assert_eq!(stored, winner);
        let left: Vec<_> = std::fs::read_dir(dir.join("5")).unwrap().collect();
        assert_eq!(left.len(), 1, "no partial file is left behind");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
