//! What a message carries, and the rules each kind of content must meet.

use serde::{Deserialize, Serialize};

use super::{Error, invalid};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    /// Application JSON, opaque to imesh.
    Custom(String),
    /// A stored object: the application's (a URL) or uploaded through imesh (a key).
    Media(MediaKind, Media),
    /// Written by the system actor only.
    Notice(Notice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Image,
    File,
    Audio,
    Video,
}

impl MediaKind {
    /// `content.<kind>.<name>`, the path of one of a media reference's fields.
    fn field(self, name: &'static str) -> &'static str {
        macro_rules! paths {
            ($($kind:ident => $prefix:literal),*) => {
                match self {
                    $(Self::$kind => match name {
                        "url" => concat!($prefix, ".url"),
                        "thumbnail_url" => concat!($prefix, ".thumbnail_url"),
                        "object_key" => concat!($prefix, ".object_key"),
                        "thumbnail_key" => concat!($prefix, ".thumbnail_key"),
                        "size_bytes" => concat!($prefix, ".size_bytes"),
                        "mime_type" => concat!($prefix, ".mime_type"),
                        "width" => concat!($prefix, ".width"),
                        "duration_ms" => concat!($prefix, ".duration_ms"),
                        _ => concat!($prefix, ".name"),
                    },)*
                }
            };
        }
        paths!(Image => "content.image", File => "content.file",
               Audio => "content.audio", Video => "content.video")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Media {
    pub url: String,
    pub size_bytes: i64,
    pub mime_type: String,
    pub width: u32,
    pub height: u32,
    pub duration_ms: u32,
    pub name: String,
    pub thumbnail_url: String,
    /// An object uploaded through imesh (instead of `url`).
    pub object_key: String,
    /// Its thumbnail, uploaded beside it (instead of `thumbnail_url`).
    pub thumbnail_key: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Notice {
    /// What happened, e.g. `member_joined`.
    pub code: String,
    /// What clients that do not know the code show.
    pub text: String,
    /// Optional JSON details.
    pub json: String,
}

const MAX_URL: usize = 2048;

/// How many characters of a quoted message a reply keeps.
const EXCERPT_CHARS: usize = 100;

impl Content {
    /// The uploaded objects it references, with the field each is named in.
    pub fn objects(&self) -> Vec<(&'static str, &str)> {
        match self {
            Self::Media(kind, media) => [
                ("object_key", &media.object_key),
                ("thumbnail_key", &media.thumbnail_key),
            ]
            .into_iter()
            .filter(|(_, key)| !key.is_empty())
            .map(|(name, key)| (kind.field(name), key.as_str()))
            .collect(),
            _ => Vec::new(),
        }
    }

    pub fn is_notice(&self) -> bool {
        matches!(self, Self::Notice(_))
    }

    /// What a reply shows of this content: the start of a text, or its kind.
    pub fn excerpt(&self) -> String {
        match self {
            Self::Text(text) => text.chars().take(EXCERPT_CHARS).collect(),
            Self::Notice(notice) => notice.text.chars().take(EXCERPT_CHARS).collect(),
            Self::Custom(_) => "[custom]".into(),
            Self::Media(MediaKind::Image, _) => "[image]".into(),
            Self::Media(MediaKind::File, _) => "[file]".into(),
            Self::Media(MediaKind::Audio, _) => "[audio]".into(),
            Self::Media(MediaKind::Video, _) => "[video]".into(),
        }
    }

    /// Checks the content against its kind's rules and the size limit (the bytes of its
    /// text, JSON or serialized reference).
    pub fn validate(&self, limit: usize) -> Result<(), Error> {
        let size = match self {
            Self::Text(text) => non_empty("content.text", text)?,
            Self::Custom(json) => {
                let size = non_empty("content.custom.json", json)?;
                parse_json("content.custom.json", json)?;
                size
            }
            Self::Media(kind, media) => {
                validate_media(*kind, media)?;
                serde_json::to_vec(media).map_or(usize::MAX, |v| v.len())
            }
            Self::Notice(notice) => {
                validate_notice(notice)?;
                notice.text.len() + notice.json.len()
            }
        };
        if size > limit {
            return Err(Error::TooLarge { size, limit });
        }
        Ok(())
    }
}

fn non_empty(field: &'static str, body: &str) -> Result<usize, Error> {
    if body.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    Ok(body.len())
}

fn parse_json(field: &'static str, json: &str) -> Result<(), Error> {
    serde_json::from_str::<serde::de::IgnoredAny>(json)
        .map(|_| ())
        .map_err(|e| invalid(field, format!("is not JSON: {e}")))
}

fn validate_media(kind: MediaKind, media: &Media) -> Result<(), Error> {
    let field = |name| kind.field(name);
    validate_location(kind, media)?;
    if !media.thumbnail_url.is_empty()
        && let Some(reason) = url_fault(&media.thumbnail_url)
    {
        return Err(invalid(field("thumbnail_url"), reason));
    }
    if media.size_bytes <= 0 {
        return Err(invalid(field("size_bytes"), "must be positive"));
    }
    let mime = &media.mime_type;
    if mime.len() > 127 || !mime.contains('/') || mime.chars().any(|c| c.is_whitespace()) {
        return Err(invalid(
            field("mime_type"),
            "must be a MIME type such as image/png",
        ));
    }
    let sized = matches!(kind, MediaKind::Image | MediaKind::Video);
    if sized && (media.width == 0 || media.height == 0) {
        return Err(invalid(field("width"), "width and height must be positive"));
    }
    let timed = matches!(kind, MediaKind::Audio | MediaKind::Video);
    if timed && media.duration_ms == 0 {
        return Err(invalid(field("duration_ms"), "must be positive"));
    }
    if kind == MediaKind::File && (media.name.trim().is_empty() || media.name.len() > 255) {
        return Err(invalid(field("name"), "must be 1–255 characters"));
    }
    Ok(())
}

/// Where the object is: exactly one of a URL and an uploaded object's key, and a thumbnail
/// key only beside an object key.
fn validate_location(kind: MediaKind, media: &Media) -> Result<(), Error> {
    let field = |name| kind.field(name);
    match (media.url.is_empty(), media.object_key.is_empty()) {
        (true, true) => return Err(invalid(field("url"), "set url or object_key")),
        (false, false) => return Err(invalid(field("url"), "set url or object_key, not both")),
        (false, true) => {
            if let Some(reason) = url_fault(&media.url) {
                return Err(invalid(field("url"), reason));
            }
        }
        (true, false) if !imesh_kit::files::is_object_key(&media.object_key) => {
            return Err(invalid(
                field("object_key"),
                "is not a key CreateUpload gave",
            ));
        }
        (true, false) => {}
    }
    if media.thumbnail_key.is_empty() {
        return Ok(());
    }
    if media.object_key.is_empty() || !media.thumbnail_url.is_empty() {
        return Err(invalid(
            field("thumbnail_key"),
            "goes with object_key, instead of thumbnail_url",
        ));
    }
    if !imesh_kit::files::is_object_key(&media.thumbnail_key) {
        return Err(invalid(
            field("thumbnail_key"),
            "is not a key CreateUpload gave",
        ));
    }
    Ok(())
}

fn url_fault(url: &str) -> Option<&'static str> {
    let scheme_ok = url.starts_with("https://") || url.starts_with("http://");
    if !scheme_ok || url.len() > MAX_URL || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Some("must be an http(s) URL of at most 2048 characters");
    }
    None
}

fn validate_notice(notice: &Notice) -> Result<(), Error> {
    let code_ok = !notice.code.is_empty()
        && notice.code.len() <= 64
        && notice
            .code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    if !code_ok {
        return Err(invalid(
            "content.notice.code",
            "must be 1–64 of a-z, 0-9, '_' and '.'",
        ));
    }
    non_empty("content.notice.text", &notice.text)?;
    if !notice.json.is_empty() {
        parse_json("content.notice.json", &notice.json)?;
    }
    Ok(())
}
