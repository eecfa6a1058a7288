//! `auth:` of `channels/eve.yaml`: JWT methods with a JWKS URL or a PEM public key, and `auth:` as
//! an ordered list of methods; each mistake is a diagnostic naming what to write.

use eve_compile::Auth;

use crate::support::TestAgent;

fn with_eve(yaml: &str) -> crate::support::Checked {
    TestAgent::minimal()
        .file("channels/eve.yaml", yaml)
        .check_mem()
}

fn messages(checked: &crate::support::Checked) -> Vec<String> {
    checked
        .diagnostics()
        .iter()
        .map(|d| format!("{} {}", d.message, d.help.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn a_jwks_method_and_a_list_of_methods_compile() {
    let checked = with_eve(
        "auth:\n  - type: jwt\n    jwks_url: https://example.auth0.com/.well-known/jwks.json\n    \
         issuer: https://example.auth0.com/\n    audience: eve-api\n    algorithms: [RS256]\n    \
         attributes: [org_id]\n    leeway: 30\n  - type: bearer\n    tokens: [\"${EVE_API_TOKEN}\"]\n\
         operators:\n  tokens: [EVE_API_TOKEN]\n  subjects: [ops]\n  claims:\n    role: operator\n",
    );
    assert!(checked.errors().is_empty(), "{:?}", messages(&checked));
    let channel = &checked.output.manifest.agent.channels[0];
    let Auth::Chain { methods } = &channel.auth else {
        panic!("{:?}", channel.auth);
    };
    assert_eq!(methods.len(), 2);
    let Auth::Jwt {
        jwks_url,
        algorithms,
        attributes,
        leeway,
        secret,
        ..
    } = &methods[0]
    else {
        panic!("{:?}", methods[0]);
    };
    assert_eq!(
        jwks_url.as_deref(),
        Some("https://example.auth0.com/.well-known/jwks.json")
    );
    assert_eq!(algorithms, &["RS256"]);
    assert_eq!(attributes, &["org_id"]);
    assert_eq!((*leeway, secret.as_deref()), (30, None));
    assert_eq!(
        channel.operators.principals,
        ["token:EVE_API_TOKEN", "jwt:ops"]
    );
}

#[test]
fn a_pem_key_may_be_written_in_the_file() {
    let checked = with_eve(
        "auth:\n  type: jwt\n  public_key: |\n    -----BEGIN PUBLIC KEY-----\n    \
         MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n    \
         -----END PUBLIC KEY-----\n",
    );
    assert!(checked.errors().is_empty(), "{:?}", messages(&checked));
}

#[test]
fn mistakes_are_named() {
    for (yaml, expected) in [
        (
            "auth:\n  type: jwt\n  secret: ${S}\n  jwks_url: https://x.test/jwks.json\n",
            "exactly one of `secret`, `jwks_url` and `public_key`, found 2",
        ),
        (
            "auth:\n  type: jwt\n  issuer: https://x.test/\n",
            "exactly one of `secret`, `jwks_url` and `public_key`, found 0",
        ),
        (
            "auth:\n  type: jwt\n  jwks_url: https://x.test/jwks.json\n  algorithms: [HS256]\n",
            "`HS256` is not an algorithm this key can verify",
        ),
        (
            "auth:\n  type: jwt\n  jwks_url: https://x.test/jwks.json\n  algorithms: [none]\n",
            "`none` is not an algorithm this key can verify",
        ),
        (
            "auth:\n  type: jwt\n  secret: ${S}\n  algorithms: [RS256]\n",
            "a `secret` verifies HS256 only",
        ),
        (
            "auth:\n  type: jwt\n  jwks_url: ftp://x.test/jwks.json\n",
            "must be an http(s) URL",
        ),
        (
            "auth:\n  type: jwt\n  public_key: not a key\n",
            "is not a PEM public key",
        ),
        (
            "auth:\n  type: jwt\n  public_key: ${K}\n  leeway: 3600\n",
            "would accept tokens long expired",
        ),
        (
            "auth:\n  - type: bearer\n    tokens: [\"${T}\"]\n  - type: none\n",
            "would let anyone in",
        ),
        ("auth: []\n", "`auth` is an empty list"),
        ("auth:\n  - bearer\n", "each method of `auth` is a mapping"),
        (
            "auth:\n  - type: bearer\n    tokens: [\"${T}\"]\noperators:\n  subjects: [ops]\n",
            "needs `auth: {type: jwt}`",
        ),
    ] {
        let checked = with_eve(yaml);
        let all = messages(&checked).join("\n");
        assert!(!checked.errors().is_empty(), "{yaml}: no error");
        assert!(all.contains(expected), "{yaml}:\n{all}");
    }
}
