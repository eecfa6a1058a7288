//! `oauth:` and `credentials:` in `connections/NAME.yaml`: what a connection file with OAuth
//! compiles to (secrets stay `${VAR}` references: no value enters the build), and each mistake a
//! coded diagnostic (E060) naming the file and the key.

use eve_compile::{Connection, Credentials, OAuthGrant, OAuthSettings};

use crate::support::TestAgent;

fn connection_of(yaml: &str) -> (Option<Connection>, Vec<String>) {
    let agent = TestAgent::minimal().file("connections/docs.yaml", yaml);
    let checked = agent.check_mem();
    (
        checked.output.manifest.agent.connections.first().cloned(),
        checked.errors(),
    )
}

#[test]
fn an_oauth_connection_compiles_with_its_secret_as_a_reference() {
    let (conn, errors) = connection_of(
        "url: https://mcp.example.com/mcp\noauth:\n  client_id: ${DOCS_CLIENT_ID}\n  \
         client_secret: ${DOCS_CLIENT_SECRET}\n  scopes: [docs.read, docs.write]\n  \
         allow: [\"127.0.0.1:9000\"]\n",
    );
    assert_eq!(errors, Vec::<String>::new());
    let conn = conn.unwrap();
    assert_eq!(
        conn.oauth,
        Some(OAuthSettings {
            grant: OAuthGrant::AuthorizationCode,
            client_id: Some("${DOCS_CLIENT_ID}".to_owned()),
            client_secret: Some("${DOCS_CLIENT_SECRET}".to_owned()),
            scopes: vec!["docs.read".to_owned(), "docs.write".to_owned()],
            allow: vec!["127.0.0.1:9000".to_owned()],
        })
    );
    assert_eq!(conn.credentials, Credentials::App);

    let (conn, errors) =
        connection_of("url: https://mcp.example.com/mcp\ncredentials: user\noauth: {}\n");
    assert_eq!(errors, Vec::<String>::new());
    let conn = conn.unwrap();
    assert_eq!(conn.credentials, Credentials::User);
    assert_eq!(conn.oauth, Some(OAuthSettings::default()));

    let (conn, errors) = connection_of(
        "url: https://mcp.example.com/mcp\noauth:\n  grant: client_credentials\n  \
         client_id: bot\n  client_secret: ${BOT_SECRET}\n",
    );
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(
        conn.unwrap().oauth.unwrap().grant,
        OAuthGrant::ClientCredentials
    );
}

#[test]
fn a_connection_without_oauth_has_none_and_app_credentials() {
    let (conn, errors) = connection_of("url: https://mcp.example.com/mcp\n");
    assert_eq!(errors, Vec::<String>::new());
    let conn = conn.unwrap();
    assert_eq!((conn.oauth, conn.credentials), (None, Credentials::App));
}

#[test]
fn every_oauth_mistake_is_a_coded_diagnostic() {
    let cases: &[(&str, &str)] = &[
        (
            "url: https://x.example/mcp\noauth:\n  client_id: a\n  client_secret: hunter2\n",
            "must be a `${VAR}` reference",
        ),
        (
            "url: https://x.example/mcp\noauth:\n  client_secret: ${S}\n",
            "`client_secret` without `client_id`",
        ),
        (
            "url: https://x.example/mcp\noauth:\n  grant: client_credentials\n",
            "needs `client_id` and `client_secret`",
        ),
        (
            "url: https://x.example/mcp\noauth:\n  grant: implicit\n",
            "not one of: authorization_code, client_credentials",
        ),
        (
            "url: https://x.example/mcp\noauth:\n  scopes: [\"a b\"]\n",
            "not a valid OAuth scope",
        ),
        (
            "url: https://x.example/mcp\noauth:\n  allow: [localhost]\n",
            "is not `host:port`",
        ),
        (
            "command: server\noauth: {}\n",
            "applies to MCP servers reached over `url:`",
        ),
        (
            "url: https://x.example/mcp\ncredentials: user\n",
            "needs an `oauth:` block",
        ),
        (
            "url: https://x.example/mcp\ncredentials: everyone\noauth: {}\n",
            "not one of: app, user",
        ),
        (
            "url: https://x.example/mcp\ncredentials: user\noauth:\n  grant: client_credentials\n  \
             client_id: a\n  client_secret: ${S}\n",
            "`credentials: user` with `grant: client_credentials`",
        ),
    ];
    for (yaml, expected) in cases {
        let (conn, errors) = connection_of(yaml);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{yaml}: expected an error containing {expected:?}, got {errors:?}"
        );
        assert!(
            conn.is_none() || errors.iter().any(|e| e.contains("E0")),
            "{yaml}"
        );
    }
    // The literal secret is not in the diagnostics either.
    let (_, errors) = connection_of(
        "url: https://x.example/mcp\noauth:\n  client_id: a\n  client_secret: hunter2\n",
    );
    assert!(errors.iter().all(|e| !e.contains("hunter2")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("E060")), "{errors:?}");
}
