//! Request bodies and queries: bounded, decoded with the types Iggy's SDK sends
//! (`iggy_common`), and refused with a 400 that names the field at fault — a field the
//! command does not know included: a request is never half understood (a `durability`
//! beside a topic's name instead of under its `options` would otherwise be dropped).

use super::error::{codes, ApiError};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::{DeserializeOwned, DeserializeSeed};

/// A JSON body decoded as `T`.
pub struct Json<T>(pub T);

/// The field a decoding error points at (`.` when the body as a whole is wrong).
fn field_of(path: &serde_path_to_error::Path) -> String {
    let path = path.to_string();
    if path.is_empty() || path == "." {
        ".".into()
    } else {
        path
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                let error = ApiError::client(codes::INVALID_COMMAND, rejection.body_text());
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    error.with_status(status)
                } else {
                    error
                }
            })?;
        decode_known(&bytes).map(Json)
    }
}

/// `T` from a JSON body, refusing any field `T` does not know, naming it.
fn decode_known<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let unknown = std::cell::RefCell::new(None);
    let seed = Known {
        unknown: &unknown,
        of: std::marker::PhantomData,
    };
    let decoded = decode_seed(bytes, seed);
    match (decoded, unknown.into_inner()) {
        (Err(_), Some(path)) => Err(ApiError::field(
            codes::INVALID_FORMAT,
            path.clone(),
            unknown_field(&path),
        )),
        (decoded, _) => decoded,
    }
}

/// `T`, refusing any field `T` does not know (`serde_ignored` reports what `T` would skip);
/// the first such field's path is left in `unknown`.
struct Known<'a, T> {
    unknown: &'a std::cell::RefCell<Option<String>>,
    of: std::marker::PhantomData<T>,
}

impl<'de, T: serde::Deserialize<'de>> DeserializeSeed<'de> for Known<'_, T> {
    type Value = T;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        let value = serde_ignored::deserialize(deserializer, |path| {
            self.unknown
                .borrow_mut()
                .get_or_insert_with(|| path.to_string());
        })?;
        match self.unknown.borrow().as_deref() {
            None => Ok(value),
            Some(path) => Err(serde::de::Error::custom(unknown_field(path))),
        }
    }
}

/// What to say of a field nobody asked for; a topic option at the top level is a common
/// slip, named as such.
fn unknown_field(path: &str) -> String {
    const TOPIC_OPTIONS: [&str; 4] = [
        "durability",
        "consumer_offset_durability",
        "segment_size",
        "replication_factor",
    ];
    if TOPIC_OPTIONS.contains(&path) {
        format!("unknown field `{path}`: topic options go under `options`")
    } else {
        format!("unknown field `{path}`")
    }
}

/// Decodes a JSON body with `seed`, refusing it with a 400 that names the field at fault.
pub fn decode_seed<'de, S: DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> Result<S::Value, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value = seed
        .deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
        .map_err(|e| {
            ApiError::field(
                codes::INVALID_FORMAT,
                field_of(&track.path()),
                format!("invalid JSON body: {e}"),
            )
        })?;
    de.end().map_err(|e| {
        ApiError::field(
            codes::INVALID_FORMAT,
            ".",
            format!("invalid JSON body: {e}"),
        )
    })?;
    Ok(value)
}

/// A query string decoded as `T`.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded_parse(query));
        let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
            ApiError::field(
                codes::INVALID_FORMAT,
                field_of(e.path()),
                format!("invalid query: {}", e.inner()),
            )
        })?;
        Ok(Query(value))
    }
}

fn form_urlencoded_parse(query: &str) -> form_urlencoded::Parse<'_> {
    form_urlencoded::parse(query.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Thing {
        name: String,
        count: u32,
    }

    async fn decode(body: &str) -> Result<Thing, ApiError> {
        let request = Request::builder()
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        Json::<Thing>::from_request(request, &()).await.map(|j| j.0)
    }

    #[test]
    fn a_wrong_type_or_missing_field_names_the_field() {
        cairn_engine::env::real::block_on(wrong_types_and_missing_fields_name_the_field());
    }

    async fn wrong_types_and_missing_fields_name_the_field() {
        let wrong = decode(r#"{"name": "a", "count": "three"}"#)
            .await
            .unwrap_err();
        assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
        assert_eq!(wrong.field.as_deref(), Some("count"));
        assert_eq!(wrong.code, codes::INVALID_FORMAT);
        let missing = decode(r#"{"name": "a"}"#).await.unwrap_err();
        assert!(missing.reason.contains("count"), "{missing:?}");
        let garbage = decode("{nope").await.unwrap_err();
        assert_eq!(garbage.status, StatusCode::BAD_REQUEST);
        let trailing = decode(r#"{"name": "a", "count": 1} x"#).await.unwrap_err();
        assert_eq!(trailing.status, StatusCode::BAD_REQUEST);
        assert!(decode(r#"{"name": "a", "count": 1}"#).await.is_ok());
    }
}
