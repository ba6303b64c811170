//! Files: upload tickets, the check that a message's objects are its sender's and stored,
//! download links for readers of the message, and the sweep of objects no message
//! references. The bytes never pass through message-svc: clients PUT and GET them
//! straight at the object store with links signed here.

use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use super::{
    Content, Conversation, Error, FileStore, Messages, Sender, Upload, UploadKind, invalid,
    ports::Blobs,
};

/// The bound on one kind of upload.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct KindLimit {
    pub max_bytes: i64,
    /// Allowed MIME types: exact (`image/png`), a whole type (`audio/*`) or anything (`*/*`).
    #[serde(deserialize_with = "imesh_kit::config::list")]
    pub mime_types: Vec<String>,
}

impl Default for KindLimit {
    fn default() -> Self {
        Self {
            max_bytes: 100 << 20,
            mime_types: vec!["*/*".into()],
        }
    }
}

impl KindLimit {
    fn of(max_bytes: i64, mime_types: &[&str]) -> Self {
        Self {
            max_bytes,
            mime_types: mime_types.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn allows(&self, mime: &str) -> bool {
        let major = mime.split('/').next().unwrap_or_default();
        self.mime_types
            .iter()
            .any(|allowed| match allowed.strip_suffix("/*") {
                Some("*") => true,
                Some(prefix) => prefix == major,
                None => allowed == mime,
            })
    }
}

/// What may be uploaded, and for how long links and unreferenced objects live.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct FileRules {
    pub image: KindLimit,
    pub file: KindLimit,
    pub audio: KindLimit,
    pub video: KindLimit,
    /// A preview uploaded beside an object.
    pub thumbnail: KindLimit,
    /// How long an upload ticket's URLs stay valid.
    pub upload_ttl_secs: u64,
    /// How long a download link stays valid.
    pub download_ttl_secs: u64,
    /// An object no message references is deleted this long after its ticket; a message
    /// may reference it only until half of this has passed.
    pub unreferenced_ttl_secs: u64,
}

impl Default for FileRules {
    fn default() -> Self {
        const IMAGES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];
        Self {
            image: KindLimit::of(20 << 20, IMAGES),
            file: KindLimit::of(100 << 20, &["*/*"]),
            audio: KindLimit::of(20 << 20, &["audio/*"]),
            video: KindLimit::of(200 << 20, &["video/*"]),
            thumbnail: KindLimit::of(512 << 10, IMAGES),
            upload_ttl_secs: 15 * 60,
            download_ttl_secs: 5 * 60,
            unreferenced_ttl_secs: 24 * 3600,
        }
    }
}

impl FileRules {
    fn limit(&self, kind: UploadKind) -> &KindLimit {
        match kind {
            UploadKind::Image => &self.image,
            UploadKind::File => &self.file,
            UploadKind::Audio => &self.audio,
            UploadKind::Video => &self.video,
            UploadKind::Thumbnail => &self.thumbnail,
        }
    }
}

/// Where uploads are recorded and stored, and the rules they follow.
pub struct Files {
    pub store: Arc<dyn FileStore>,
    /// `None`: this deployment keeps no files, and asking for any is refused.
    pub blobs: Option<Arc<dyn Blobs>>,
    pub rules: FileRules,
}

/// What a client asks to upload.
#[derive(Debug, Clone, Default)]
pub struct UploadRequest {
    pub kind: Option<UploadKind>,
    pub mime_type: String,
    pub size_bytes: i64,
    pub thumbnail_size_bytes: i64,
    pub thumbnail_mime_type: String,
}

/// Where to PUT one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadTarget {
    pub key: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    pub object: UploadTarget,
    pub thumbnail: Option<UploadTarget>,
    pub expires_at_ms: i64,
}

/// Links to a message's stored object and thumbnail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    pub url: String,
    pub thumbnail_url: Option<String>,
    pub expires_at_ms: i64,
}

impl Files {
    fn blobs(&self) -> Result<&dyn Blobs, Error> {
        self.blobs.as_deref().ok_or(Error::FilesOff)
    }
}

/// Uploads forgotten per sweep query.
const SWEEP_PAGE: u32 = 100;

impl Messages {
    /// A ticket for `by` to upload one object (and its thumbnail) within the rules.
    pub async fn create_upload(&self, by: Sender, request: UploadRequest) -> Result<Ticket, Error> {
        let files = &self.files;
        let blobs = files.blobs()?;
        let kind = request
            .kind
            .filter(|k| *k != UploadKind::Thumbnail)
            .ok_or_else(|| invalid("kind", "must be image, file, audio or video"))?;
        let now = imesh_kit::ids::unix_ms();
        let mut uploads = vec![checked_upload(
            files.rules.limit(kind),
            (kind, &request.mime_type, request.size_bytes),
            ("mime_type", "size_bytes"),
        )?];
        if request.thumbnail_size_bytes != 0 || !request.thumbnail_mime_type.is_empty() {
            uploads.push(checked_upload(
                &files.rules.thumbnail,
                (
                    UploadKind::Thumbnail,
                    &request.thumbnail_mime_type,
                    request.thumbnail_size_bytes,
                ),
                ("thumbnail_mime_type", "thumbnail_size_bytes"),
            )?);
        }
        // Only a ticket that could be given takes from the budget.
        if let Sender::User(user) = by {
            self.rates.check_ticket(user)?;
        }
        let uploads: Vec<Upload> = uploads
            .into_iter()
            .map(|(kind, mime_type, size_bytes)| Upload {
                key: format!("{}/{:032x}", by.id(), rand::random::<u128>()),
                owner: by.id(),
                kind,
                mime_type: mime_type.to_owned(),
                size_bytes,
                created_at_ms: now,
                stored: false,
            })
            .collect();
        files.store.add_uploads(&uploads).await?;
        let ttl = Duration::from_secs(files.rules.upload_ttl_secs.max(1));
        let mut targets = uploads.iter().map(|u| {
            let (url, headers) = blobs.upload_url(&u.key, u.size_bytes, &u.mime_type, ttl);
            UploadTarget {
                key: u.key.clone(),
                url,
                headers,
            }
        });
        Ok(Ticket {
            object: targets.next().expect("the object's target"),
            thumbnail: targets.next(),
            expires_at_ms: now + ttl.as_millis() as i64,
        })
    }

    /// Links to the object (and thumbnail) of message `seq`, for a `reader` who may read it.
    pub async fn download(
        &self,
        reader: Sender,
        conversation_id: &str,
        seq: i64,
    ) -> Result<Download, Error> {
        let conversation = Conversation::parse(conversation_id)?;
        let message = self
            .visible_message(reader, conversation, conversation_id, seq)
            .await?;
        let Content::Media(_, media) = &message.content else {
            return Err(Error::NoObject);
        };
        if media.object_key.is_empty() {
            return Err(Error::NoObject);
        }
        let rules = &self.files.rules;
        let ttl = Duration::from_secs(rules.download_ttl_secs.max(1));
        let blobs = self.files.blobs()?;
        let thumbnail_url = match media.thumbnail_key.as_str() {
            "" => None,
            key => {
                let upload = self.files.store.uploads(&[key]).await?;
                let mime = upload
                    .first()
                    .map_or("image/jpeg", |u| u.mime_type.as_str());
                Some(blobs.download_url(key, mime, ttl))
            }
        };
        Ok(Download {
            url: blobs.download_url(&media.object_key, &media.mime_type, ttl),
            thumbnail_url,
            expires_at_ms: imesh_kit::ids::unix_ms() + ttl.as_millis() as i64,
        })
    }

    /// Checks the uploaded objects a user's content references: `sender` uploaded them,
    /// recently enough (but for `kept`, an edited message's own), as this kind, type and
    /// size, and the bytes are in storage.
    pub(super) async fn check_objects(
        &self,
        sender: Sender,
        content: &Content,
        kept: &[&str],
    ) -> Result<(), Error> {
        let objects = content.objects();
        let Content::Media(kind, media) = content else {
            return Ok(());
        };
        if objects.is_empty() {
            return Ok(());
        }
        self.files.blobs()?;
        let keys: Vec<&str> = objects.iter().map(|(_, key)| *key).collect();
        let found = self.files.store.uploads(&keys).await?;
        let oldest =
            imesh_kit::ids::unix_ms() - self.files.rules.unreferenced_ttl_secs as i64 * 500;
        for (field, key) in objects {
            let upload = found
                .iter()
                .find(|u| {
                    u.key == key
                        && u.owner == sender.id()
                        && (u.created_at_ms >= oldest || kept.contains(&key))
                })
                .ok_or_else(|| invalid(field, "no recent upload of yours has this key"))?;
            let expected = match key == media.object_key {
                true => (
                    UploadKind::from(*kind),
                    media.mime_type.as_str(),
                    media.size_bytes,
                ),
                false => (
                    UploadKind::Thumbnail,
                    upload.mime_type.as_str(),
                    upload.size_bytes,
                ),
            };
            if (upload.kind, upload.mime_type.as_str(), upload.size_bytes) != expected {
                return Err(invalid(
                    field,
                    "was uploaded as another kind, type or size than this message says",
                ));
            }
            if !upload.stored {
                self.confirm_stored(field, upload).await?;
            }
        }
        Ok(())
    }

    /// Checks that the bytes of `upload` are in storage at their declared size, once.
    async fn confirm_stored(&self, field: &'static str, upload: &Upload) -> Result<(), Error> {
        let size = self
            .files
            .blobs()?
            .size(&upload.key)
            .await
            .map_err(Error::Blobs)?;
        match size {
            None => Err(Error::Precondition(
                field,
                "the object was not uploaded yet",
            )),
            Some(size) if size != upload.size_bytes => Err(Error::Precondition(
                field,
                "the uploaded object's size is not the size its ticket declared",
            )),
            Some(_) => Ok(self.files.store.mark_stored(&upload.key).await?),
        }
    }

    /// Deletes the objects no message references whose tickets are older than the rules
    /// allow; the number deleted.
    pub async fn sweep_files(&self) -> Result<usize, Error> {
        self.sweep_files_at(imesh_kit::ids::unix_ms()).await
    }

    /// [`Self::sweep_files`] as of `now_ms`.
    pub(super) async fn sweep_files_at(&self, now_ms: i64) -> Result<usize, Error> {
        let Ok(blobs) = self.files.blobs() else {
            return Ok(0);
        };
        let ttl_ms = self.files.rules.unreferenced_ttl_secs as i64 * 1000;
        let before = now_ms - ttl_ms;
        let mut deleted = 0;
        loop {
            let keys = self.files.store.unreferenced(before, SWEEP_PAGE).await?;
            let page = keys.len();
            for key in keys {
                // The object goes first: a row left behind is swept again, an object
                // without its row would never be.
                blobs.delete(&key).await.map_err(Error::Blobs)?;
                if self.files.store.forget_unreferenced(&key).await? {
                    deleted += 1;
                }
            }
            if page < SWEEP_PAGE as usize {
                return Ok(deleted);
            }
        }
    }
}

/// The upload `(kind, mime, size)` if it keeps within `limit`; errors name `fields`.
fn checked_upload<'a>(
    limit: &KindLimit,
    (kind, mime, size): (UploadKind, &'a str, i64),
    (mime_field, size_field): (&'static str, &'static str),
) -> Result<(UploadKind, &'a str, i64), Error> {
    let token = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$&^_.+-".contains(&b))
    };
    let well_formed = mime.len() <= 127
        && mime
            .split_once('/')
            .is_some_and(|(major, minor)| token(major) && token(minor));
    if !well_formed {
        return Err(invalid(
            mime_field,
            "must be a lower-case MIME type without parameters, such as image/png",
        ));
    }
    if !limit.allows(mime) {
        return Err(invalid(
            mime_field,
            format!("must be one of {}", limit.mime_types.join(", ")),
        ));
    }
    if size <= 0 || size > limit.max_bytes {
        return Err(invalid(
            size_field,
            format!("must be 1–{} bytes", limit.max_bytes),
        ));
    }
    Ok((kind, mime, size))
}
