//! `limits.session_timeout` and `retention:` of `agent.yaml`: eve's 30-day default, durations
//! with units, `false` for never, and bad values as diagnostics naming the field.

use crate::support::TestAgent;

fn compiled(yaml: &str) -> (Option<u64>, Option<u64>, Vec<String>) {
    let checked = TestAgent::minimal().file("agent.yaml", yaml).check_mem();
    let config = &checked.output.manifest.agent.config;
    (
        config.limits.session_timeout_ms,
        config.retention_ms,
        checked.errors(),
    )
}

#[test]
fn the_timeout_defaults_to_thirty_days_and_retention_keeps_sessions() {
    let (timeout, retention, errors) = compiled("default_tools: false\n");
    assert_eq!(timeout, Some(30 * 24 * 3_600_000));
    assert_eq!(retention, None);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn durations_false_and_zero_compile() {
    let cases = [
        (
            "limits:\n  session_timeout: 7d\nretention: 0\n",
            Some(7 * 86_400_000),
            Some(0),
        ),
        (
            "limits:\n  session_timeout: 90\nretention: 12h\n",
            Some(90_000),
            Some(43_200_000),
        ),
        (
            "limits:\n  session_timeout: false\nretention: default\n",
            None,
            None,
        ),
    ];
    for (yaml, timeout, retention) in cases {
        let (t, r, errors) = compiled(yaml);
        assert!(errors.is_empty(), "{yaml}: {errors:?}");
        assert_eq!((t, r), (timeout, retention), "{yaml}");
    }
}

#[test]
fn bad_values_are_diagnostics_naming_the_field() {
    for (yaml, field) in [
        ("limits:\n  session_timeout: soon\n", "`session_timeout`"),
        ("limits:\n  session_timeout: true\n", "`session_timeout`"),
        ("retention: forever\n", "`retention`"),
        ("retention: -5\n", "`retention`"),
    ] {
        let (_, _, errors) = compiled(yaml);
        assert!(
            errors.iter().any(|e| e.contains(field)),
            "{yaml}: {errors:?}"
        );
    }
}
