//! Signed links to stored files, for the embedded file store the gateway serves:
//!
//! `PUT|GET <base>/<key>?expires=<unix s>&size=<bytes>&type=<mime>&sig=<hex>`
//!
//! message-svc hands the links out (an upload ticket, a download for a reader of the
//! conversation); the gateway checks them before it writes or reads a byte. Both derive the
//! signing key from the deployment's internal credential, so there is no key of its own to
//! distribute. `sig` is HMAC-SHA256 over the method, the key, the expiry, the size (the
//! upload's exact length; 0 on a download) and the MIME type, so none of them can be
//! changed. Object keys are `<owner id>/<32 hex digits>`: nothing else reaches the disk.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::Secret;

/// What a link lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Upload,
    Download,
}

impl Access {
    fn method(self) -> &'static str {
        match self {
            Self::Upload => "PUT",
            Self::Download => "GET",
        }
    }
}

/// The signed parts of one link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link<'a> {
    pub access: Access,
    pub key: &'a str,
    /// Unix seconds after which the link is refused.
    pub expires: i64,
    /// An upload's exact length in bytes; 0 on a download.
    pub size: i64,
    /// The object's MIME type: the upload's `Content-Type`, the download's.
    pub mime: &'a str,
}

/// Why a link was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the link has expired")]
    Expired,
    #[error("the link's signature does not match")]
    Forged,
    #[error("not an object key")]
    BadKey,
}

/// Signs and checks links with the key derived from the internal credential.
#[derive(Clone)]
pub struct LinkSigner {
    key: [u8; 32],
}

impl LinkSigner {
    pub fn new(internal_secret: &Secret) -> Self {
        let mut mac = Hmac::<Sha256>::new_from_slice(internal_secret.expose().as_bytes())
            .expect("HMAC takes a key of any size");
        mac.update(b"imesh files v1");
        Self {
            key: mac.finalize().into_bytes().into(),
        }
    }

    /// The query pairs that make `link` valid, `sig` last.
    pub fn query(&self, link: &Link) -> [(&'static str, String); 4] {
        [
            ("expires", link.expires.to_string()),
            ("size", link.size.to_string()),
            ("type", link.mime.to_string()),
            ("sig", hex::encode(self.mac(link).finalize().into_bytes())),
        ]
    }

    /// Whether `sig` signs `link` and the link is still valid at `now` (unix seconds).
    pub fn verify(&self, link: &Link, sig: &str, now: i64) -> Result<(), Refused> {
        if !is_object_key(link.key) {
            return Err(Refused::BadKey);
        }
        let sig = hex::decode(sig).map_err(|_| Refused::Forged)?;
        self.mac(link)
            .verify_slice(&sig)
            .map_err(|_| Refused::Forged)?;
        match now > link.expires {
            true => Err(Refused::Expired),
            false => Ok(()),
        }
    }

    fn mac(&self, link: &Link) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("a 32-byte key");
        let signed = format!(
            "{}\n{}\n{}\n{}\n{}",
            link.access.method(),
            link.key,
            link.expires,
            link.size,
            link.mime
        );
        mac.update(signed.as_bytes());
        mac
    }
}

/// `<owner id>/<32 lower-case hex digits>`: the only keys imesh makes.
pub fn is_object_key(key: &str) -> bool {
    let Some((owner, name)) = key.split_once('/') else {
        return false;
    };
    !owner.is_empty()
        && owner.len() <= 19
        && owner.bytes().all(|b| b.is_ascii_digit())
        && name.len() == 32
        && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "42/0123456789abcdef0123456789abcdef";

    fn link(access: Access) -> Link<'static> {
        Link {
            access,
            key: KEY,
            expires: 1_000,
            size: 5,
            mime: "image/png",
        }
    }

    fn sig<'a>(query: &'a [(&'static str, String); 4]) -> &'a str {
        &query[3].1
    }

    #[test]
    fn a_signed_link_verifies_until_it_expires() {
        let signer = LinkSigner::new(&Secret::new("internal-secret-0123456789"));
        let query = signer.query(&link(Access::Upload));
        assert_eq!(
            signer.verify(&link(Access::Upload), sig(&query), 1_000),
            Ok(())
        );
        assert_eq!(
            signer.verify(&link(Access::Upload), sig(&query), 1_001),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn every_signed_part_and_the_credential_are_bound() {
        let signer = LinkSigner::new(&Secret::new("internal-secret-0123456789"));
        let query = signer.query(&link(Access::Upload));
        let changed = [
            link(Access::Download),
            Link {
                key: "43/0123456789abcdef0123456789abcdef",
                ..link(Access::Upload)
            },
            Link {
                expires: 2_000,
                ..link(Access::Upload)
            },
            Link {
                size: 6,
                ..link(Access::Upload)
            },
            Link {
                mime: "text/html",
                ..link(Access::Upload)
            },
        ];
        for other in changed {
            assert_eq!(
                signer.verify(&other, sig(&query), 0),
                Err(Refused::Forged),
                "{other:?}"
            );
        }
        let elsewhere = LinkSigner::new(&Secret::new("another-secret-0123456789"));
        assert_eq!(
            elsewhere.verify(&link(Access::Upload), sig(&query), 0),
            Err(Refused::Forged)
        );
        assert_eq!(
            signer.verify(&link(Access::Upload), "zz", 0),
            Err(Refused::Forged)
        );
    }

    #[test]
    fn only_owner_and_hex_name_keys_are_object_keys() {
        assert!(is_object_key(KEY));
        assert!(is_object_key("0/0123456789abcdef0123456789abcdef"));
        for bad in [
            "",
            "42",
            "42/",
            "/0123456789abcdef0123456789abcdef",
            "42/0123456789ABCDEF0123456789abcdef",
            "42/0123456789abcdef0123456789abcde",
            "42/../0123456789abcdef0123456789ab",
            "4a/0123456789abcdef0123456789abcdef",
            "42/0123456789abcdef0123456789abcdef/x",
        ] {
            assert!(!is_object_key(bad), "{bad:?}");
        }
    }
}
