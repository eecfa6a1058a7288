//! JWT with an identity provider's asymmetric keys, through the real server: a loopback JWKS
//! server rotates its keys (RS256, then ES256, then EdDSA), tokens signed with the old and new
//! keys are accepted in turn; attacks (`alg: none`, HS256 signed with the public key, a key id
//! the set does not hold, a flood of made-up key ids) each refused, with a twin showing the
//! attack token would pass a verifier without that protection; a PEM key; leeway; and `auth:` as
//! an ordered list of methods.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use eve_runtime::server::JWKS_FETCHES_PER_MINUTE;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const ISSUER: &str = "https://issuer.test/";

/// A signing key made by `openssl`, with its public PEM.
struct Key {
    alg: Algorithm,
    kid: String,
    private: EncodingKey,
    public_pem: String,
}

impl Key {
    fn new(alg: Algorithm, kid: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("key.pem");
        let gen_args: Vec<&str> = match alg {
            Algorithm::RS256 => vec!["genrsa", "-traditional", "-out"],
            Algorithm::ES256 => vec![
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ],
            Algorithm::EdDSA => vec!["genpkey", "-algorithm", "ed25519", "-out"],
            other => panic!("no test key for {other:?}"),
        };
        let mut command = Command::new("openssl");
        command.args(&gen_args).arg(&private);
        if alg == Algorithm::RS256 {
            command.arg("2048");
        }
        assert!(command.output().unwrap().status.success());
        let public = Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&private)
            .output()
            .unwrap();
        assert!(public.status.success());
        let pem = std::fs::read(&private).unwrap();
        let private = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem),
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
            _ => EncodingKey::from_ed_pem(&pem),
        }
        .unwrap();
        Self {
            alg,
            kid: kid.to_owned(),
            private,
            public_pem: String::from_utf8(public.stdout).unwrap(),
        }
    }

    /// The public JWK, as a provider's key set lists it.
    fn jwk(&self) -> Value {
        let mut jwk =
            serde_json::to_value(Jwk::from_encoding_key(&self.private, self.alg).unwrap()).unwrap();
        jwk["kid"] = json!(self.kid);
        jwk["use"] = json!("sig");
        jwk
    }

    fn sign_with_kid(&self, claims: &Value, kid: Option<&str>) -> String {
        let mut header = Header::new(self.alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.private).unwrap()
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_with_kid(claims, Some(&self.kid))
    }
}

/// A loopback JWKS endpoint serving whatever set the test puts in, counting fetches.
struct JwksServer {
    url: String,
    set: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start() -> Self {
        let set = Arc::new(Mutex::new(json!({"keys": []})));
        let fetches = Arc::new(AtomicUsize::new(0));
        let state = (set.clone(), fetches.clone());
        let app = Router::new()
            .route(
                "/.well-known/jwks.json",
                get(
                    |State((set, fetches)): State<(Arc<Mutex<Value>>, Arc<AtomicUsize>)>| async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let body = set.lock().unwrap().clone();
                        axum::Json(body)
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().unwrap()
        );
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, set, fetches }
    }

    fn serve(&self, keys: &[&Key]) {
        *self.set.lock().unwrap() =
            json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()});
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn claims(sub: &str) -> Value {
    let now = chrono::Utc::now().timestamp();
    json!({"sub": sub, "iss": ISSUER, "aud": "eve-api", "exp": now + 300, "org_id": "org_42"})
}

async fn status(server: &TestServer, token: &str) -> u16 {
    server
        .http
        .get(server.url("/eve/v1/info"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn with_channel(yaml: &str) -> AgentDir {
    let agent = AgentDir::standard();
    agent.file("channels/eve.yaml", yaml);
    agent
}

async fn jwks_server_for(url: &str) -> TestServer {
    TestServer::start_with(
        with_channel(&format!(
            "auth:\n  type: jwt\n  jwks_url: ${{JWKS_URL}}\n  issuer: {ISSUER}\n  audience: eve-api\n  \
             attributes: [org_id]\n"
        )),
        &[("JWKS_URL", url)],
        |c| c,
    )
    .await
}

#[tokio::test]
async fn jwks_keys_rotate_and_tokens_of_each_key_are_accepted_in_turn() {
    let jwks = JwksServer::start().await;
    let rsa = Key::new(Algorithm::RS256, "rsa-2026-01");
    let ec = Key::new(Algorithm::ES256, "ec-2026-02");
    let ed = Key::new(Algorithm::EdDSA, "ed-2026-03");
    jwks.serve(&[&rsa]);
    let server = jwks_server_for(&jwks.url).await;

    // The first key: fetched once, then held.
    assert_eq!(status(&server, &rsa.sign(&claims("alice"))).await, 200);
    assert_eq!(status(&server, &rsa.sign(&claims("bob"))).await, 200);
    assert_eq!(jwks.fetches(), 1, "the key set is cached");

    // The provider rotates to an EC key: a token naming it makes the server fetch again.
    jwks.serve(&[&ec]);
    assert_eq!(status(&server, &ec.sign(&claims("alice"))).await, 200);
    assert_eq!(jwks.fetches(), 2);
    // The retired key no longer verifies anything.
    assert_eq!(status(&server, &rsa.sign(&claims("alice"))).await, 401);

    // And on to Ed25519, the EC key kept beside it.
    jwks.serve(&[&ec, &ed]);
    assert_eq!(status(&server, &ed.sign(&claims("carol"))).await, 200);
    assert_eq!(status(&server, &ec.sign(&claims("carol"))).await, 200);

    // A token without `kid` is verified by the only key of its family.
    assert_eq!(
        status(&server, &ed.sign_with_kid(&claims("dave"), None)).await,
        200
    );

    // Issuer and audience are checked after the signature: 403.
    let mut other = claims("alice");
    other["iss"] = json!("https://elsewhere.test/");
    assert_eq!(status(&server, &ec.sign(&other)).await, 403);
    let mut other = claims("alice");
    other["aud"] = json!("another-api");
    assert_eq!(status(&server, &ec.sign(&other)).await, 403);

    // Times with the default leeway of 60 s: ten seconds late passes, two minutes does not.
    let now = chrono::Utc::now().timestamp();
    let mut late = claims("alice");
    late["exp"] = json!(now - 10);
    assert_eq!(status(&server, &ec.sign(&late)).await, 200);
    late["exp"] = json!(now - 120);
    assert_eq!(status(&server, &ec.sign(&late)).await, 401);
    let mut early = claims("alice");
    early["nbf"] = json!(now + 600);
    assert_eq!(status(&server, &ec.sign(&early)).await, 401);
    let mut forever = claims("alice");
    forever.as_object_mut().unwrap().remove("exp");
    assert_eq!(status(&server, &ec.sign(&forever)).await, 401);
    server.stop().await;
}

#[tokio::test]
async fn attacks_on_a_jwks_method_are_refused_and_their_twins_show_why() {
    let jwks = JwksServer::start().await;
    let rsa = Key::new(Algorithm::RS256, "rsa-1");
    jwks.serve(&[&rsa]);
    let server = jwks_server_for(&jwks.url).await;
    let good = claims("alice");
    assert_eq!(status(&server, &rsa.sign(&good)).await, 200);

    // `alg: none`, naming the served key: refused. Its twin, the same claims signed, passes.
    let none = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT","kid":"rsa-1"}"#),
        URL_SAFE_NO_PAD.encode(good.to_string())
    );
    assert_eq!(status(&server, &none).await, 401);

    // Algorithm confusion: HS256 keyed with the provider's public key (which anyone can read).
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","kid":"rsa-1"}"#);
    let forged = {
        use hmac::Mac as _;
        let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(good.to_string()));
        let mut mac =
            hmac::Hmac::<sha2::Sha256>::new_from_slice(rsa.public_pem.as_bytes()).unwrap();
        mac.update(input.as_bytes());
        format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    };
    assert_eq!(status(&server, &forged).await, 401);

    // A key the set does not hold (another signer's, with a made-up id): refused.
    let stranger = Key::new(Algorithm::RS256, "rsa-1");
    assert_eq!(status(&server, &stranger.sign(&good)).await, 401);
    let before = jwks.fetches();
    // A flood of made-up key ids fetches the set at most a few times a minute.
    for i in 0..20 {
        let token = stranger.sign_with_kid(&good, Some(&format!("made-up-{i}")));
        assert_eq!(status(&server, &token).await, 401);
    }
    let fetched = jwks.fetches() - before;
    assert!(
        fetched <= JWKS_FETCHES_PER_MINUTE,
        "{fetched} fetches for 20 unknown key ids"
    );
    // Still, the real key keeps working.
    assert_eq!(status(&server, &rsa.sign(&good)).await, 200);
    server.stop().await;

    // The twin of the confusion attack: a verifier that lets the token's `alg` pick HMAC with the
    // public key as its secret accepts exactly the forged token.
    let confused = TestServer::start_with(
        with_channel("auth:\n  type: jwt\n  secret: ${PUBLIC_AS_SECRET}\n"),
        &[("PUBLIC_AS_SECRET", rsa.public_pem.as_str())],
        |c| c,
    )
    .await;
    assert_eq!(status(&confused, &forged).await, 200);
    confused.stop().await;
}

#[tokio::test]
async fn a_pem_public_key_verifies_its_own_family_only() {
    let ec = Key::new(Algorithm::ES256, "ec");
    let other = Key::new(Algorithm::ES256, "ec");
    let rsa = Key::new(Algorithm::RS256, "rsa");
    let server = TestServer::start_with(
        with_channel(
            "auth:\n  type: jwt\n  public_key: ${JWT_PUBLIC_KEY}\n  algorithms: [ES256]\n",
        ),
        &[("JWT_PUBLIC_KEY", ec.public_pem.as_str())],
        |c| c,
    )
    .await;
    assert_eq!(status(&server, &ec.sign(&claims("alice"))).await, 200);
    assert_eq!(status(&server, &other.sign(&claims("alice"))).await, 401);
    assert_eq!(status(&server, &rsa.sign(&claims("alice"))).await, 401);
    server.stop().await;
}

#[tokio::test]
async fn auth_as_a_list_is_tried_in_order() {
    let ec = Key::new(Algorithm::ES256, "ec");
    let yaml = "auth:\n  - type: jwt\n    public_key: ${JWT_PUBLIC_KEY}\n    issuer: https://issuer.test/\n  \
                - type: bearer\n    tokens: [\"${SERVICE_TOKEN}\"]\n  - type: basic\n    username: ops\n    \
                password: ${OPS_PASSWORD}\noperators:\n  users: [ops]\n";
    let server = TestServer::start_with(
        with_channel(yaml),
        &[
            ("JWT_PUBLIC_KEY", ec.public_pem.as_str()),
            ("SERVICE_TOKEN", "service-secret"),
            ("OPS_PASSWORD", "ops-pass"),
        ],
        |c| c,
    )
    .await;
    let basic = format!("Basic {}", STANDARD.encode("ops:ops-pass"));
    for (authorization, want) in [
        (format!("Bearer {}", ec.sign(&claims("alice"))), 200),
        ("Bearer service-secret".to_owned(), 200),
        (basic.clone(), 200),
        ("Bearer wrong".to_owned(), 401),
        (format!("Basic {}", STANDARD.encode("ops:wrong")), 401),
    ] {
        let response = server
            .http
            .get(server.url("/eve/v1/info"))
            .header("authorization", &authorization)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), want, "{authorization}");
        if want == 401 {
            let challenge = response.headers()["www-authenticate"].to_str().unwrap();
            assert_eq!(challenge, "Basic realm=\"eve\", Bearer");
        }
    }
    // A verified token of another issuer ends the walk with a 403.
    let mut other = claims("alice");
    other["iss"] = json!("https://elsewhere.test/");
    assert_eq!(status(&server, &ec.sign(&other)).await, 403);

    // Each method's principal owns its sessions; the basic user is an operator.
    let create = |auth: String| {
        let http = server.http.clone();
        let url = server.url("/eve/v1/session");
        async move {
            let r = http
                .post(url)
                .header("authorization", auth)
                .json(&json!({"message": "hi"}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202);
            r.json::<Value>().await.unwrap()["sessionId"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let jwt = format!("Bearer {}", ec.sign(&claims("alice")));
    let alice = create(jwt.clone()).await;
    let get_as = |auth: String, id: String| {
        let http = server.http.clone();
        let url = server.url(&format!("/eve/v1/session/{id}/stream?follow=false"));
        async move {
            http.get(url)
                .header("authorization", auth)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(get_as(jwt.clone(), alice.clone()).await, 200);
    assert_eq!(
        get_as("Bearer service-secret".to_owned(), alice.clone()).await,
        404
    );
    assert_eq!(get_as(basic, alice).await, 200);
    server.stop().await;
}
