//! Who may see and steer the sweeps: whoever holds the server's token, as Jupyter does. The
//! URL printed at the start carries it (`/?token=…`); the answer sets a cookie, and the page
//! drops the token from the address bar, scripts send `Authorization: Bearer …`. A control (a POST)
//! must also come from the server's own origin: a page elsewhere cannot steer a sweep through
//! a user's browser (CSRF), and the cookie is `SameSite=Strict` besides.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::secret::is_token;

/// The cookie a page keeps the token in.
pub const COOKIE: &str = "tune_token";

/// The token a request carries: its bearer header, or its cookie.
fn sent_token(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = || {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|pair| pair.trim().strip_prefix(&format!("{COOKIE}=")))
    };
    bearer.or_else(cookie)
}

/// The `token` query parameter of `uri`.
fn token_in_query(uri: &Uri) -> Option<String> {
    uri.query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .map(str::to_string)
}

/// Whether a request that changes something comes from this server's own pages: its
/// `Origin` (or, without one, `Referer`) names the host it was sent to. Scripts sending
/// neither, with the bearer token, are let through.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let named = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok());
    match named {
        None => headers.contains_key(header::AUTHORIZATION),
        Some(origin) => ["http://", "https://"].iter().any(|scheme| {
            origin
                .strip_prefix(scheme)
                .and_then(|rest| rest.strip_prefix(host))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        }),
    }
}

/// The check every request passes first.
pub async fn require_token(State(token): State<String>, request: Request, next: Next) -> Response {
    // A link with the token (`/?token=…`): answered, and the token kept in a cookie; the page
    // then takes it out of the address bar. Not a redirect: a Strict cookie set on the way
    // into a link followed from another site would not be sent on the redirected request.
    let mut set_cookie = None;
    if request.method() == Method::GET {
        if let Some(sent) = token_in_query(request.uri()) {
            if !is_token(&sent, &token) {
                return refused(StatusCode::UNAUTHORIZED, "wrong token");
            }
            set_cookie = HeaderValue::from_str(&format!(
                "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
            ))
            .ok();
        }
    }
    if set_cookie.is_none()
        && !sent_token(request.headers()).is_some_and(|sent| is_token(sent, &token))
    {
        return refused(
            StatusCode::UNAUTHORIZED,
            "a token is required: open the URL `tune serve` printed (with ?token=), or send \
             `Authorization: Bearer TOKEN`",
        );
    }
    if request.method() != Method::GET && !same_origin(request.headers()) {
        return refused(
            StatusCode::FORBIDDEN,
            "a control must come from this server's own pages (the Origin header differs)",
        );
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if let Some(cookie) = set_cookie {
        headers.insert(header::SET_COOKIE, cookie);
    }
    // Nothing from elsewhere, no inline script, never in a frame, no token in a Referer.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn refused(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": why }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_a_bearer_header_or_the_cookie_and_leaves_the_address() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; tune_token=abc; b=2".parse().unwrap());
        assert_eq!(sent_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Bearer xyz".parse().unwrap());
        assert_eq!(sent_token(&h), Some("xyz"));
        let uri: Uri = "/s?x=1&token=t0k&y=2".parse().unwrap();
        assert_eq!(token_in_query(&uri), Some("t0k".into()));
    }

    #[test]
    fn a_control_from_another_origin_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8000".parse().unwrap());
        h.insert(header::ORIGIN, "http://127.0.0.1:8000".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&h));
        h.insert(
            header::ORIGIN,
            "http://127.0.0.1:8000.evil.example".parse().unwrap(),
        );
        assert!(!same_origin(&h));
        h.remove(header::ORIGIN);
        // Neither Origin nor Referer: only a script with the bearer header.
        assert!(!same_origin(&h));
        h.insert(header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert!(same_origin(&h));
    }
}
