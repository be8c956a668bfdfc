use super::rules::{validate, FilePolicyOnly};
use super::*;

fn rules(text: &str, source: Source) -> Vec<Rule> {
    let raw: FilePolicyOnly = toml::from_str(text).expect("toml");
    validate(&raw.policy, source, "f.toml", text).expect("valid")
}

fn cx(repo: Option<&str>) -> Context {
    Context {
        repo: repo.map(String::from),
        ..Default::default()
    }
}

#[test]
fn repo_globs_match_by_whole_segment_and_a_repoless_request_only_matches_star() {
    let g = |s: &str| RepoGlob::parse(s).unwrap();
    assert!(g("acme/*").matches(Some("ACME/api")));
    assert!(!g("acme/*").matches(Some("acmex/api")));
    assert!(g("*/api").matches(Some("x/api")));
    assert!(g("acme/api").matches(Some("acme/api")));
    assert!(!g("acme/api").matches(Some("acme/web")));
    assert!(!g("acme/*").matches(None));
    assert!(g("*").matches(None));
    assert!(RepoGlob::parse("acme/a*").is_err());
    assert!(RepoGlob::parse("a/b/c").is_err());
    assert!(g("acme/*").overlaps(&g("acme/api")));
    assert!(!g("acme/*").overlaps(&g("other/api")));
    assert!(g("*/api").overlaps(&g("acme/*")));
}

#[test]
fn rules_match_in_order_and_conditions_must_all_hold() {
    let set = PolicySet {
        user: rules(
            r#"
[[policy]]
repo = "acme/secret"
create = "fail"
[[policy]]
repo = "*"
network = "metered"
list = "cache"
[[policy]]
situation = "surge_429"
create = "queue"
"#,
            Source::User,
        ),
        ..Default::default()
    };
    let d = set.decide(Function::Create, &cx(Some("acme/secret")));
    assert_eq!(
        (d.action, d.header()),
        (Action::Fail, "user:1 create=fail".to_string())
    );
    let d = set.decide(Function::Create, &cx(Some("acme/web")));
    assert_eq!(
        (d.action, d.rule.source),
        (Action::Fallback, Source::Default)
    );
    let mut c = cx(Some("acme/web"));
    c.situations = Situations::default().with(Situation::Surge429);
    let d = set.decide(Function::Create, &c);
    assert_eq!((d.action, d.situational), (Action::Queue, true));
    assert_eq!(set.decide(Function::List, &c).action, Action::Pass);
    c.metered = true;
    assert_eq!(set.decide(Function::List, &c).header(), "user:2 list=cache");
    assert_eq!(
        set.decide(Function::Model, &c).header(),
        "default model=fallback"
    );
}

#[test]
fn a_user_rule_tightens_but_never_loosens_an_org_rule() {
    let org = rules(
        "[[policy]]\nrepo = \"acme/*\"\ncreate = \"queue\"\nmodel = \"never\"\n",
        Source::Org,
    );
    let user = rules(
        "# mine\n[[policy]]\nrepo = \"acme/api\"\ncreate = \"local\"\n[[policy]]\nrepo = \"acme/db\"\ncreate = \"fail\"\n[[policy]]\nrepo = \"other/*\"\ncreate = \"local\"\nmodel = \"fallback\"\n",
        Source::User,
    );
    let refused = refusals(&org, &user);
    assert_eq!(refused.len(), 1, "{refused:?}");
    let r = &refused[0];
    assert_eq!(
        (r.user.to_string(), r.org.to_string()),
        ("user:1".into(), "org:1".into())
    );
    assert!(
        r.message.contains("f.toml:2") && r.message.contains("f.toml:1"),
        "{}",
        r.message
    );
    let set = PolicySet {
        org,
        user,
        org_file: None,
        refused,
        org_share: None,
    };
    let d = set.decide(Function::Create, &cx(Some("acme/api")));
    assert_eq!(d.header(), "org:1 create=queue");
    assert!(d.why.contains("may not loosen"), "{}", d.why);
    assert_eq!(
        set.decide(Function::Create, &cx(Some("acme/db"))).header(),
        "user:2 create=fail"
    );
    // Outside the org rule's repositories the user rule stands.
    assert_eq!(
        set.decide(Function::Create, &cx(Some("other/x"))).header(),
        "user:3 create=local"
    );
    assert_eq!(
        set.decide(Function::Model, &cx(Some("acme/db"))).header(),
        "org:1 model=never"
    );
}

#[test]
fn strictness_orders_are_the_documented_ones() {
    let rank = |f, w| Action::parse(f, w).unwrap().rank();
    assert!(rank(Function::List, "pass") < rank(Function::List, "cache"));
    let c = ["local", "fallback", "queue", "fail"].map(|w| rank(Function::Create, w));
    assert!(c.windows(2).all(|w| w[0] < w[1]));
    assert!(rank(Function::Model, "fallback") < rank(Function::Model, "never"));
    assert!(Action::parse(Function::List, "queue").is_none());
}

#[test]
fn bad_rules_name_the_line_and_key() {
    let text = "[[policy]]\nrepo = \"acme/*\"\ncreate = \"later\"\n";
    let raw: FilePolicyOnly = toml::from_str(text).unwrap();
    let e = validate(&raw.policy, Source::User, "c.toml", text)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:3: key `policy.create`"), "{e}");
    let text = "[[policy]]\nrepo = \"acme/*\"\n";
    let raw: FilePolicyOnly = toml::from_str(text).unwrap();
    let e = validate(&raw.policy, Source::User, "c.toml", text)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sets no action"), "{e}");
    let text = "[[policy]]\nsituation = \"storm\"\nlist = \"cache\"\n";
    let raw: FilePolicyOnly = toml::from_str(text).unwrap();
    let e = validate(&raw.policy, Source::User, "c.toml", text)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:2: key `policy.situation`"), "{e}");
}

#[test]
fn the_repository_comes_from_the_agent_api_path() {
    assert_eq!(
        repo_of("/agents/swe/v1/jobs/acme/api").as_deref(),
        Some("acme/api")
    );
    assert_eq!(
        repo_of("/agents/swe/v1/jobs/acme/api/42").as_deref(),
        Some("acme/api")
    );
    assert_eq!(
        repo_of("/agents/sessions/nwo/acme/api").as_deref(),
        Some("acme/api")
    );
    assert_eq!(
        repo_of("/agents/swe/custom-agents/acme/api").as_deref(),
        Some("acme/api")
    );
    assert_eq!(repo_of("/agents/sessions"), None);
    assert_eq!(repo_of("/agents/sessions/abc"), None);
}
