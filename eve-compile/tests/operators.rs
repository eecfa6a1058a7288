//! `operators:` of `channels/eve.yaml`: who reaches every session. Names that this API can
//! authenticate go into the manifest as principal ids; a name that can never match is an E071
//! naming the file and what to write, never a silent no-op.

use eve_discover::Code;
use serde_json::json;

use crate::support::TestAgent;

fn with_eve(yaml: &str) -> crate::support::Checked {
    TestAgent::minimal()
        .file("channels/eve.yaml", yaml)
        .check_mem()
}

fn operator_errors(checked: &crate::support::Checked) -> Vec<String> {
    checked
        .diagnostics()
        .iter()
        .filter(|d| d.code == Code::InvalidOperators)
        .map(|d| {
            format!(
                "{}:{} {}",
                d.line.unwrap_or(0),
                d.message,
                d.help.clone().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn tokens_subjects_claims_and_platform_users_become_principals() {
    let bearer = with_eve(
        "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\", \"${OPS_TOKEN}\"]\n\
         operators:\n  tokens: [OPS_TOKEN]\n  principals: [\"slack:U024BE7LH\"]\n",
    );
    assert!(bearer.errors().is_empty(), "{:?}", bearer.errors());
    let channel = &bearer.output.manifest.agent.channels[0];
    assert_eq!(
        channel.operators.principals,
        ["token:OPS_TOKEN", "slack:U024BE7LH"]
    );
    assert!(!channel.settings.contains_key("operators"));

    let jwt = with_eve(
        "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  subjects: [ops@example.com]\n  \
         claims:\n    role: operator\n",
    );
    assert!(jwt.errors().is_empty(), "{:?}", jwt.errors());
    let ops = &jwt.output.manifest.agent.channels[0].operators;
    assert_eq!(ops.principals, ["jwt:ops@example.com"]);
    assert_eq!(ops.claims.get("role"), Some(&json!("operator")));

    let basic = with_eve(
        "auth:\n  type: basic\n  username: ops\n  password: ${PASSWORD}\noperators:\n  users: [ops]\n",
    );
    assert!(basic.errors().is_empty(), "{:?}", basic.errors());
}

#[test]
fn a_name_this_api_cannot_authenticate_is_an_error() {
    let cases = [
        (
            "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\"]\noperators:\n  tokens: [EVE_ADMIN]\n",
            "operator token `EVE_ADMIN` is not one of `auth.tokens`",
        ),
        (
            "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\"]\noperators:\n  claims: {role: operator}\n",
            "needs JWT authentication",
        ),
        (
            "auth:\n  type: bearer\n  tokens: [\"${EVE_API_TOKEN}\"]\noperators:\n  subjects: [alice]\n",
            "needs `auth: {type: jwt}`",
        ),
        (
            "auth:\n  type: basic\n  username: ops\n  password: ${PASSWORD}\noperators:\n  users: [root]\n",
            "is not `auth.username`",
        ),
        (
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  principals: [alice]\n",
            "is not a principal id",
        ),
        (
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  principals: [\"github:alice\"]\n",
            "`github` is not a kind of principal",
        ),
        (
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators:\n  claims: {role: [a, b]}\n",
            "must be a string, number or boolean",
        ),
        (
            "auth:\n  type: jwt\n  secret: ${JWT_SECRET}\noperators: [alice]\n",
            "`operators` must be a mapping",
        ),
        (
            "operators:\n  principals: [anonymous]\n",
            "already an operator",
        ),
    ];
    for (yaml, wanted) in cases {
        let checked = with_eve(yaml);
        let errors = operator_errors(&checked);
        assert!(
            errors.iter().any(|e| e.contains(wanted)),
            "{yaml}\nwanted `{wanted}` in {errors:?}"
        );
        assert!(
            errors.iter().all(|e| !e.starts_with("0:")),
            "E071 points at its line: {errors:?}"
        );
    }
}

#[test]
fn operators_live_in_the_api_channel_only() {
    let checked = TestAgent::minimal()
        .file(
            "channels/slack.yaml",
            "kind: slack\nsigning_secret: ${SLACK_SIGNING_SECRET}\nbot_token: ${SLACK_BOT_TOKEN}\n\
             operators:\n  principals: [\"slack:U1\"]\n",
        )
        .check_mem();
    let errors = operator_errors(&checked);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("operators are named once, in channels/eve.yaml")),
        "{errors:?}"
    );
}
