//! Who is calling. Every internal gRPC call carries the deployment's internal credential
//! (`x-imesh-internal`) and the acting principal (`x-imesh-actor`: `user:<id>` or `system`).
//! [`InternalAuth`] checks both and puts an [`Actor`] into the request extensions; handlers
//! read it with [`actor`]. A user id in a request body is never an identity.

use std::sync::Arc;

use tonic::{Request, Status, metadata::MetadataValue};

use crate::config::Secret;

pub const INTERNAL_HEADER: &str = "x-imesh-internal";
pub const ACTOR_HEADER: &str = "x-imesh-actor";
/// The end user's network address, when the caller knows it (the gateway sets it; an app
/// server calling on a user's behalf may): an IPv4 or IPv6 address, no port.
pub const CLIENT_ADDR_HEADER: &str = "x-imesh-client-addr";

/// The principal a call acts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    /// imesh itself, or a company service / operator tool holding the internal credential.
    System,
    User(i64),
}

impl Actor {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "system" => Some(Self::System),
            _ => value
                .strip_prefix("user:")
                .and_then(|id| id.parse().ok())
                .filter(|id| *id > 0)
                .map(Self::User),
        }
    }

    fn header(&self) -> MetadataValue<tonic::metadata::Ascii> {
        match self {
            Self::System => MetadataValue::from_static("system"),
            Self::User(id) => format!("user:{id}")
                .parse()
                .expect("digits are valid metadata"),
        }
    }

    /// The calling user, for RPCs that act on a user's own data.
    pub fn user(&self) -> Result<i64, Status> {
        match self {
            Self::User(id) => Ok(*id),
            Self::System => Err(Status::permission_denied(format!(
                "this call acts as a user: set {ACTOR_HEADER}: user:<id>"
            ))),
        }
    }

    /// For RPCs only imesh's own services and operators may call.
    pub fn require_system(&self) -> Result<(), Status> {
        match self {
            Self::System => Ok(()),
            Self::User(_) => Err(Status::permission_denied("this call is internal to imesh")),
        }
    }
}

/// The caller put in place by [`InternalAuth`].
pub fn actor<T>(request: &Request<T>) -> Result<Actor, Status> {
    request
        .extensions()
        .get::<Actor>()
        .copied()
        .ok_or_else(|| Status::internal("service mounted without InternalAuth"))
}

/// The end user's address from [`CLIENT_ADDR_HEADER`], if the call carries one.
pub fn client_addr<T>(request: &Request<T>) -> Result<Option<std::net::IpAddr>, Status> {
    let Some(value) = request.metadata().get(CLIENT_ADDR_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "{CLIENT_ADDR_HEADER}: must be an IPv4 or IPv6 address"
            ))
        })
}

/// Server-side interceptor: checks the internal credential and records the actor.
#[derive(Clone)]
pub struct InternalAuth {
    secret: Arc<str>,
}

impl InternalAuth {
    pub fn new(secret: &Secret) -> Self {
        Self {
            secret: secret.expose().into(),
        }
    }
}

impl tonic::service::Interceptor for InternalAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let given = request.metadata().get(INTERNAL_HEADER).ok_or_else(|| {
            Status::unauthenticated(format!("missing {INTERNAL_HEADER} metadata"))
        })?;
        if !constant_time_eq(given.as_bytes(), self.secret.as_bytes()) {
            return Err(Status::unauthenticated(format!(
                "{INTERNAL_HEADER} is not this deployment's credential"
            )));
        }
        let actor = match request.metadata().get(ACTOR_HEADER) {
            None => Actor::System,
            Some(value) => value.to_str().ok().and_then(Actor::parse).ok_or_else(|| {
                Status::unauthenticated(format!("{ACTOR_HEADER} must be `system` or `user:<id>`"))
            })?,
        };
        request.extensions_mut().insert(actor);
        Ok(request)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Client side: builds requests that carry the credential, the actor and the trace context.
#[derive(Clone)]
pub struct Caller {
    secret: MetadataValue<tonic::metadata::Ascii>,
}

impl Caller {
    pub fn new(secret: &Secret) -> anyhow::Result<Self> {
        Ok(Self {
            secret: secret.expose().parse()?,
        })
    }

    pub fn request<T>(&self, actor: Actor, message: T) -> Request<T> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert(INTERNAL_HEADER, self.secret.clone());
        metadata.insert(ACTOR_HEADER, actor.header());
        crate::telemetry::inject_context(metadata);
        request
    }
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor;

    use super::*;

    fn auth() -> InternalAuth {
        InternalAuth::new(&Secret::new("0123456789abcdef"))
    }

    #[test]
    fn caller_requests_pass_the_interceptor_with_their_actor() {
        let caller = Caller::new(&Secret::new("0123456789abcdef")).unwrap();
        let req = caller.request(Actor::User(42), ()).map(|()| ());
        let req = auth().call(req).unwrap();
        assert_eq!(actor(&req).unwrap(), Actor::User(42));
    }

    #[test]
    fn wrong_or_missing_credential_is_unauthenticated() {
        let wrong = Caller::new(&Secret::new("fedcba9876543210")).unwrap();
        let err = auth().call(wrong.request(Actor::System, ())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        let err = auth().call(Request::new(())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert!(err.message().contains(INTERNAL_HEADER));
    }

    #[test]
    fn actor_parsing_rejects_garbage_and_defaults_to_system() {
        assert_eq!(Actor::parse("user:7"), Some(Actor::User(7)));
        assert_eq!(Actor::parse("user:0"), None);
        assert_eq!(Actor::parse("user:x"), None);
        assert_eq!(Actor::parse("admin"), None);
        let mut req = Request::new(());
        req.metadata_mut()
            .insert(INTERNAL_HEADER, "0123456789abcdef".parse().unwrap());
        assert_eq!(actor(&auth().call(req).unwrap()).unwrap(), Actor::System);
        let mut req = Request::new(());
        req.metadata_mut()
            .insert(INTERNAL_HEADER, "0123456789abcdef".parse().unwrap());
        req.metadata_mut()
            .insert(ACTOR_HEADER, "root".parse().unwrap());
        assert_eq!(
            auth().call(req).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
