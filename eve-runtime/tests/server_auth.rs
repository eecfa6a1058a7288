//! Authentication from `channels/eve.yaml`: none, bearer, basic and JWT (valid, forged, expired,
//! missing), `/health` always public, the loopback rule, browser protection and CORS.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use eve_runtime::server::{ServerConfig, ServerError, sign_hs256};
use serde_json::{Value, json};

use super::server_support::{AgentDir, TestServer};

const UNAUTHORIZED: &str =
    r#"{"code":"unauthorized","error":"Authorization is required for this route.","ok":false}"#;

fn with_channel(yaml: &str) -> AgentDir {
    let agent = AgentDir::standard();
    agent.file("channels/eve.yaml", yaml);
    agent
}

/// Status and body of `GET /eve/v1/info` with an optional `Authorization` header.
async fn info(server: &TestServer, authorization: Option<&str>) -> (u16, Value, Option<String>) {
    let mut request = server.http.get(server.url("/eve/v1/info"));
    if let Some(a) = authorization {
        request = request.header("authorization", a);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, challenge)
}

async fn assert_unauthorized(server: &TestServer, authorization: Option<&str>) {
    let (status, body, challenge) = info(server, authorization).await;
    assert_eq!(status, 401, "{authorization:?}");
    assert_eq!(body, serde_json::from_str::<Value>(UNAUTHORIZED).unwrap());
    assert!(challenge.is_some(), "a 401 carries WWW-Authenticate");
}

async fn assert_public_health(server: &TestServer) {
    let (status, body) = server.get("/eve/v1/health").await;
    assert_eq!((status, body["ok"].as_bool()), (200, Some(true)));
}

#[tokio::test]
async fn bearer_tokens() {
    let server = TestServer::start_with(
        with_channel(
            "kind: http\nauth:\n  type: bearer\n  tokens: [\"${TOKEN_A}\", \"${TOKEN_B}\"]\n",
        ),
        &[("TOKEN_A", "alpha-secret"), ("TOKEN_B", "beta-secret")],
        |c| c,
    )
    .await;
    assert_public_health(&server).await;
    assert_eq!(info(&server, Some("Bearer alpha-secret")).await.0, 200);
    assert_eq!(info(&server, Some("bearer beta-secret")).await.0, 200);
    for bad in [
        None,
        Some("Bearer"),
        Some("Bearer "),
        Some("Bearer alpha-secre"),
        Some("Bearer alpha-secret2"),
        Some("Basic alpha-secret"),
        Some("alpha-secret"),
    ] {
        assert_unauthorized(&server, bad).await;
    }
    // Every guarded route, not just /info.
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .bearer_auth("alpha-secret")
        .json(&json!({"message": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    server.stop().await;
}

#[tokio::test]
async fn basic_auth() {
    let server = TestServer::start_with(
        with_channel("auth:\n  type: basic\n  username: ops\n  password: ${OPS_PASSWORD}\n"),
        &[("OPS_PASSWORD", "pa:ss word")],
        |c| c,
    )
    .await;
    assert_public_health(&server).await;
    let basic =
        |user: &str, pass: &str| format!("Basic {}", STANDARD.encode(format!("{user}:{pass}")));
    assert_eq!(
        info(&server, Some(&basic("ops", "pa:ss word"))).await.0,
        200
    );
    for bad in [
        basic("ops", "pa:ss wor"),
        basic("Ops", "pa:ss word"),
        basic("", ""),
        "Basic !!!not-base64".to_owned(),
        format!("Basic {}", STANDARD.encode("no-colon")),
        format!("Basic {}", STANDARD.encode([0xff, 0xfe, b':', b'x'])),
        "Bearer pa:ss word".to_owned(),
    ] {
        assert_unauthorized(&server, Some(&bad)).await;
    }
    let (_, _, challenge) = info(&server, None).await;
    assert_eq!(challenge.as_deref(), Some("Basic realm=\"eve\""));
    server.stop().await;
}

#[tokio::test]
async fn jwt_hs256() {
    let secret = "jwt-test-secret-0123456789";
    let server = TestServer::start_with(
        with_channel(
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\n  issuer: https://issuer.test\n  \
             audience: eve-api\n",
        ),
        &[("JWT_SECRET", secret)],
        |c| c,
    )
    .await;
    assert_public_health(&server).await;
    let now = chrono::Utc::now().timestamp();
    let good =
        json!({"sub": "user-1", "iss": "https://issuer.test", "aud": "eve-api", "exp": now + 300});
    let bearer =
        |claims: &Value, key: &str| format!("Bearer {}", sign_hs256(claims, key.as_bytes()));
    assert_eq!(info(&server, Some(&bearer(&good, secret))).await.0, 200);
    let mut listed = good.clone();
    listed["aud"] = json!(["other", "eve-api"]);
    assert_eq!(info(&server, Some(&bearer(&listed, secret))).await.0, 200);

    // Forged, expired, not yet valid, tampered, alg none, garbage, missing: 401.
    let mut expired = good.clone();
    // Past the default leeway of 60 s.
    expired["exp"] = json!(now - 120);
    let mut early = good.clone();
    early["nbf"] = json!(now + 600);
    let mut bad_exp = good.clone();
    bad_exp["exp"] = json!("tomorrow");
    let valid = sign_hs256(&good, secret.as_bytes());
    let mut parts: Vec<String> = valid.split('.').map(str::to_owned).collect();
    let mut elevated = good.clone();
    elevated["sub"] = json!("admin");
    parts[1] = URL_SAFE_NO_PAD.encode(elevated.to_string());
    let tampered = format!("Bearer {}", parts.join("."));
    let none_alg = format!(
        "Bearer {}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(good.to_string())
    );
    for bad in [
        bearer(&good, "another-secret"),
        bearer(&expired, secret),
        bearer(&early, secret),
        bearer(&bad_exp, secret),
        tampered,
        none_alg,
        "Bearer a.b.c".to_owned(),
        "Bearer not-a-jwt".to_owned(),
        format!("Bearer {valid}.extra"),
        format!("Basic {valid}"),
    ] {
        assert_unauthorized(&server, Some(&bad)).await;
    }
    assert_unauthorized(&server, None).await;

    // A verified token for another issuer or audience: 403.
    for (key, value) in [
        ("iss", json!("https://elsewhere.test")),
        ("aud", json!("other-api")),
    ] {
        let mut claims = good.clone();
        claims[key] = value;
        let (status, body, _) = info(&server, Some(&bearer(&claims, secret))).await;
        assert_eq!(status, 403, "{key}");
        assert_eq!(body["code"], "forbidden");
        assert_eq!(body["ok"], false);
    }
    server.stop().await;
}

#[tokio::test]
async fn configuration_errors_and_the_loopback_rule() {
    // An unset secret is an error naming the file and the variable.
    let agent = with_channel("auth:\n  type: bearer\n  tokens: [\"${UNSET_TOKEN_VAR}\"]\n");
    agent.build();
    let manifest: eve_compile::Manifest = serde_json::from_str(
        &std::fs::read_to_string(agent.root().join(".eve/current/manifest.json")).unwrap(),
    )
    .unwrap();
    let err = ServerConfig::from_manifest(&manifest, &|_| None).unwrap_err();
    assert!(matches!(err, ServerError::MissingSecret { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("channels/eve.yaml") && text.contains("UNSET_TOKEN_VAR"),
        "{text}"
    );

    // Without auth only loopback; with auth anything.
    let open = ServerConfig::default();
    for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"] {
        assert!(open.check_host(host).is_ok(), "{host}");
    }
    for host in ["0.0.0.0", "::", "192.168.1.10", "example.com"] {
        let err = open.check_host(host).unwrap_err();
        assert!(err.to_string().contains("eve.yaml"), "{err}");
    }
    let secured = ServerConfig::from_manifest(&manifest, &|_| Some("t".to_owned())).unwrap();
    assert!(secured.check_host("0.0.0.0").is_ok());

    // Bad CORS settings are named.
    let agent = with_channel("cors:\n  origins: [\"not an origin\"]\n");
    agent.build();
    let manifest: eve_compile::Manifest = serde_json::from_str(
        &std::fs::read_to_string(agent.root().join(".eve/current/manifest.json")).unwrap(),
    )
    .unwrap();
    let err = ServerConfig::from_manifest(&manifest, &|_| None).unwrap_err();
    assert!(err.to_string().contains("cors.origins"), "{err}");
}

#[tokio::test]
async fn an_open_api_refuses_foreign_hosts_and_origins() {
    let server = TestServer::start(AgentDir::standard()).await;
    let get = |headers: &[(&str, &str)]| {
        let mut request = server.http.get(server.url("/eve/v1/info"));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send()
    };
    assert_eq!(get(&[]).await.unwrap().status(), 200);
    assert_eq!(
        get(&[("host", "localhost:3000")]).await.unwrap().status(),
        200
    );
    // DNS rebinding: a page on evil.test resolving to 127.0.0.1.
    let response = get(&[("host", "evil.test:3000")]).await.unwrap();
    assert_eq!(response.status(), 403);
    // A page elsewhere posting to localhost.
    let response = server
        .http
        .post(server.url("/eve/v1/session"))
        .header("origin", "https://evil.test")
        .header("content-type", "text/plain")
        .body("{\"message\": \"/tool refund_charge {}\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        get(&[("origin", "http://localhost:5173")])
            .await
            .unwrap()
            .status(),
        200
    );
    // Health stays public.
    let response = server
        .http
        .get(server.url("/eve/v1/health"))
        .header("origin", "https://evil.test")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    server.stop().await;
}

#[tokio::test]
async fn cors_from_the_channel() {
    let server = TestServer::start_with(
        with_channel(
            "auth:\n  type: bearer\n  tokens: [\"${TOKEN}\"]\ncors:\n  origins: \
             [\"https://app.example.com\"]\n",
        ),
        &[("TOKEN", "tok")],
        |c| c,
    )
    .await;
    // A preflight needs no credentials and names the allowed origin.
    let response = server
        .http
        .request(reqwest::Method::OPTIONS, server.url("/eve/v1/session"))
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    let response = server
        .http
        .get(server.url("/eve/v1/info"))
        .header("origin", "https://app.example.com")
        .bearer_auth("tok")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(exposed.contains("x-eve-session-id"), "{exposed}");
    let response = server
        .http
        .get(server.url("/eve/v1/info"))
        .header("origin", "https://other.example.com")
        .bearer_auth("tok")
        .send()
        .await
        .unwrap();
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    server.stop().await;
}

#[tokio::test]
async fn a_jwt_without_exp_is_refused_unless_the_channel_says_otherwise() {
    let secret = "jwt-test-secret-0123456789";
    let forever = format!(
        "Bearer {}",
        sign_hs256(&json!({"sub": "user-1"}), secret.as_bytes())
    );
    let strict = TestServer::start_with(
        with_channel("auth:\n  type: jwt\n  secret: ${JWT_SECRET}\n"),
        &[("JWT_SECRET", secret)],
        |c| c,
    )
    .await;
    assert_eq!(info(&strict, Some(&forever)).await.0, 401);
    let now = chrono::Utc::now().timestamp();
    let bounded = format!(
        "Bearer {}",
        sign_hs256(
            &json!({"sub": "user-1", "exp": now + 60}),
            secret.as_bytes()
        )
    );
    assert_eq!(info(&strict, Some(&bounded)).await.0, 200);
    strict.stop().await;

    let lax = TestServer::start_with(
        with_channel("auth:\n  type: jwt\n  secret: ${JWT_SECRET}\n  require_exp: false\n"),
        &[("JWT_SECRET", secret)],
        |c| c,
    )
    .await;
    assert_eq!(info(&lax, Some(&forever)).await.0, 200);
    lax.stop().await;
}
