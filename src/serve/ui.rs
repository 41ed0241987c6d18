//! The chat page of `k3 serve` (ENGINE.md §11, issue 27): `GET /` is one self-contained HTML
//! page (`ui/page.html`: its CSS and JavaScript inline, no request to any other host, which
//! its Content-Security-Policy enforces in the browser) that talks to the server's own
//! `/v1/chat/completions`; `GET /favicon.ico` is its icon. `--no-ui` turns both off (404).
//! Both are served without the API key: the page holds no secret, and behind `--api-key` it
//! asks for the key and sends it as `Authorization: Bearer` like any client.

use crate::http::{Request, Response};

/// The page (≈ 20 kB, uncompressed: small next to the binary, and no `Accept-Encoding` logic).
pub const PAGE: &str = include_str!("ui/page.html");

/// The icon: a 32×32 PNG inside an ICO container.
pub const FAVICON: &[u8] = include_bytes!("ui/favicon.ico");

/// What the browser may load for the page: nothing from another host, no framing.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is one of the page's routes.
pub fn is_ui_path(path: &str) -> bool {
    matches!(path, "/" | "/index.html" | "/favicon.ico")
}

/// The response for a page route (`path` as [`is_ui_path`] accepts; the method is GET or
/// HEAD, checked by the caller).
pub fn response(req: &Request) -> Response {
    if req.path() == "/favicon.ico" {
        return Response::new(200, "image/x-icon", FAVICON.to_vec())
            .header("Cache-Control", "max-age=86400");
    }
    Response::new(200, "text/html; charset=utf-8", PAGE.as_bytes().to_vec())
        .header("Content-Security-Policy", CSP)
        .header("X-Frame-Options", "DENY")
        .header("X-Content-Type-Options", "nosniff")
        .header("Referrer-Policy", "no-referrer")
        .header("Cache-Control", "no-cache")
}

#[cfg(test)]
mod tests {
    use super::{FAVICON, PAGE};

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // no URL of another host, no external script, style or font
        for bad in [
            "http://",
            "https://",
            "//cdn",
            "@import",
            "src=\"http",
            "url(http",
        ] {
            assert!(!PAGE.contains(bad), "page.html contains {bad:?}");
        }
        assert!(PAGE.starts_with("<!doctype html>"));
        assert!(PAGE.len() < 30_000, "page.html is {} bytes", PAGE.len());
        // model output reaches the page as text only
        assert!(
            !PAGE.contains("innerHTML"),
            "page.html must not use innerHTML"
        );
        assert!(!PAGE.contains("insertAdjacentHTML"));
    }

    #[test]
    fn the_icon_is_an_ico_holding_a_png() {
        assert_eq!(&FAVICON[..4], &[0, 0, 1, 0]);
        assert_eq!(&FAVICON[22..26], b"\x89PNG");
    }
}
