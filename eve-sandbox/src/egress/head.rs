//! Reading and rewriting HTTP/1.1 heads for the egress proxy.
//!
//! A client of the proxy sends one request head: `CONNECT host:port` for a tunnel (https, git over
//! https, pip) or an absolute-form request (`GET http://host/path`) for plain http. This module
//! parses that head with `httparse` under a size cap, extracts the destination, and rewrites a
//! plain request into the origin-form head the upstream server expects, without `Proxy-*` or
//! hop-by-hop headers and with `Connection: close`. It never panics on what a client sends: every
//! malformed head becomes an [`HeadError`] that maps to a status code.

/// Headers a request head may carry; more is answered with 431.
const MAX_HEADERS: usize = 100;

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) kind: Kind,
    /// The destination host as written (brackets kept for IPv6 literals).
    pub(crate) host: String,
    pub(crate) port: u16,
}

#[derive(Debug)]
pub(crate) enum Kind {
    /// `CONNECT host:port`: tunnel the rest of the connection.
    Connect,
    /// An absolute-form request; `head` is the rewritten origin-form head to send upstream.
    Forward { head: Vec<u8> },
}

/// Why a head is refused before any connection is made.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// The head is not complete yet; read more.
    Partial,
    /// More headers than [`MAX_HEADERS`].
    TooManyHeaders,
    /// Not HTTP, or not a request this proxy handles; the text says what is wrong.
    Bad(String),
}

/// Where the head ends (the index just past `\r\n\r\n`), if it is complete.
pub(crate) fn parse(buf: &[u8]) -> Result<(RequestHead, usize), HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let end = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(HeadError::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(e) => return Err(HeadError::Bad(format!("not an HTTP request ({e})"))),
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Bad("incomplete request line".to_string()));
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target, None)?;
        return Ok((
            RequestHead {
                kind: Kind::Connect,
                host,
                port,
            },
            end,
        ));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(HeadError::Bad(format!(
            "`{method} {target}` is not for a proxy: eve's egress proxy takes `CONNECT host:port` or an absolute URL such as `GET http://host/path`"
        )));
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HeadError::Bad(format!(
            "`{scheme}://` cannot be forwarded as plain HTTP: use CONNECT (clients do so for https:// when HTTPS_PROXY is set)"
        )));
    }
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    // userinfo (`user:pass@host`) is not part of the destination.
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = split_authority(authority, Some(80))?;
    let path = path.split('#').next().unwrap_or_default();
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };

    let mut head = Vec::with_capacity(end + 64);
    head.extend_from_slice(format!("{method} {path} HTTP/1.{version}\r\n").as_bytes());
    let host_header = if port == 80 {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    head.extend_from_slice(format!("Host: {host_header}\r\n").as_bytes());
    let dropped = connection_tokens(req.headers);
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name == "host"
            || name.starts_with("proxy-")
            || HOP_BY_HOP.contains(&name.as_str())
            || dropped.contains(&name)
        {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok((
        RequestHead {
            kind: Kind::Forward { head },
            host,
            port,
        },
        end,
    ))
}

/// Headers that belong to one hop; `Transfer-Encoding` stays since it frames the body we relay
/// unchanged.
const HOP_BY_HOP: &[&str] = &["connection", "keep-alive", "te", "trailer", "upgrade"];

/// Header names listed in `Connection:` (each is hop-by-hop too).
fn connection_tokens(headers: &[httparse::Header<'_>]) -> Vec<String> {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty() && t != "close")
        .collect()
}

/// Splits `host:port` (or `[v6]:port`); `default` is the port when none is written.
fn split_authority(authority: &str, default: Option<u16>) -> Result<(String, u16), HeadError> {
    let bad = |why: &str| HeadError::Bad(format!("bad destination `{authority}`: {why}"));
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => {
                let (h, rest) = authority.split_at(i + 1);
                match rest.strip_prefix(':') {
                    Some(p) => (h, Some(p)),
                    None if rest.is_empty() => (h, None),
                    None => return Err(bad("only `:port` may follow `]`")),
                }
            }
            None => return Err(bad("`[` without `]`")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let port = match (port, default) {
        (Some(p), _) if !p.is_empty() => match p.parse::<u16>() {
            Ok(n) if n != 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(bad("the port is not a number from 1 to 65535")),
        },
        (_, Some(d)) => d,
        (_, None) => return Err(bad("CONNECT needs `host:port`")),
    };
    Ok((host.to_string(), port))
}

/// What the start of an upstream response holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ResponseHead {
    /// Not a complete head yet.
    Partial,
    /// Not an HTTP/1 response: relay the bytes unchanged.
    NotHttp,
    /// A complete 1xx head ending at this index: relay it unchanged, a final one follows.
    Interim(usize),
    /// The final head, rewritten so the client knows the connection ends with this response
    /// (hop-by-hop and `Proxy-*` headers dropped, `Connection: close` added), and where the
    /// original ends.
    Final(Vec<u8>, usize),
}

pub(crate) fn response_head(buf: &[u8]) -> ResponseHead {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let end = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return ResponseHead::Partial,
        Err(_) => return ResponseHead::NotHttp,
    };
    let (Some(version), Some(code)) = (resp.version, resp.code) else {
        return ResponseHead::NotHttp;
    };
    if code < 200 {
        return ResponseHead::Interim(end);
    }
    let reason = resp.reason.unwrap_or_default();
    let mut head = Vec::with_capacity(end + 32);
    head.extend_from_slice(format!("HTTP/1.{version} {code} {reason}\r\n").as_bytes());
    let dropped = connection_tokens(resp.headers);
    for h in resp.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name.starts_with("proxy-")
            || name == "connection"
            || name == "keep-alive"
            || dropped.contains(&name)
        {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    ResponseHead::Final(head, end)
}

/// A complete response the proxy itself gives (403, 502, 400, …), with a text body.
pub(crate) fn response(status: u16, reason: &str, body: &str) -> Vec<u8> {
    let body = format!("{body}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &[u8] = b"GET http://Example.com:8080/p?q=1#frag HTTP/1.1\r\nHost: other\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\nbody";

    #[test]
    fn absolute_form_becomes_origin_form() {
        let (req, end) = parse(REQUEST).unwrap();
        assert_eq!(&REQUEST[end..], b"body");
        assert_eq!((req.host.as_str(), req.port), ("Example.com", 8080));
        let Kind::Forward { head } = req.kind else {
            panic!("not forwarded")
        };
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /p?q=1 HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let (req, _) = parse(b"GET http://u:p@[::1]?x HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((req.host.as_str(), req.port), ("[::1]", 80));
        let Kind::Forward { head } = req.kind else {
            panic!("not forwarded")
        };
        assert!(head.starts_with(b"GET /?x HTTP/1.0\r\nHost: [::1]\r\n"));
    }

    #[test]
    fn every_prefix_is_partial_or_parsed_and_never_panics() {
        for n in 0..REQUEST.len() {
            match parse(&REQUEST[..n]) {
                Err(HeadError::Partial) | Ok(_) => {}
                other => panic!("prefix {n}: {other:?}"),
            }
        }
        // Deterministic pseudo-random bytes, and every one-byte corruption of a valid head.
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..2000 {
            let len = (x % 300) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = parse(&bytes);
            let _ = response_head(&bytes);
        }
        for i in 0..REQUEST.len() {
            for b in [0u8, b' ', b':', b'[', b']', b'/', b'@', 0xff, b'\n'] {
                let mut bad = REQUEST.to_vec();
                bad[i] = b;
                let _ = parse(&bad);
            }
        }
    }

    #[test]
    fn bad_destinations_are_refused() {
        for head in [
            &b"CONNECT host HTTP/1.1\r\n\r\n"[..],
            b"CONNECT host:0 HTTP/1.1\r\n\r\n",
            b"CONNECT host:+80 HTTP/1.1\r\n\r\n",
            b"CONNECT [::1 HTTP/1.1\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\n\r\n",
            b"GET ftp://x/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET http:///path HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(parse(head), Err(HeadError::Bad(_))),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }
}
