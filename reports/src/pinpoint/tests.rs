//! The renderers of a pinpoint report on one made-up search.

use super::*;
use crate::model::Verdict;

fn comparison(previous: f64, current: f64) -> Comparison {
    Comparison {
        method: ComparisonMethod::Exact,
        reference: "previous".into(),
        reference_n: 3,
        reference_mean: previous,
        difference: current - previous,
        ci_low: Some(current - previous),
        ci_high: Some(current - previous),
        confidence: 1.0,
        relative: Some((current - previous) / previous),
        relative_ci_low: None,
        relative_ci_high: None,
        df: None,
        p_value: None,
        threshold: 0.02,
        threshold_absolute: None,
        verdict: Verdict::Regressed,
        anova: None,
        confirmation: None,
    }
}

fn report() -> PinpointReport {
    PinpointReport::new(Pinpoint {
        metric: "instructions".into(),
        unit: "instructions".into(),
        source: "valgrind callgrind".into(),
        previous: "old".into(),
        current: "new".into(),
        args: Vec::new(),
        function: "main".into(),
        runs: 3,
        strategy: "binary".into(),
        chain: vec![
            Link::new("main".into(), 0, false, 3, comparison(1000.0, 1300.0)),
            Link::new("deep<T>".into(), 1, false, 3, comparison(400.0, 700.0)),
        ],
        bottleneck: Some("deep<T>".into()),
        bottleneck_share_percent: None,
        repeated: None,
        inside: Vec::new(),
        stopped: "no call made by deep got worse".into(),
        stop: "own_code".into(),
        comparisons: 5,
        warnings: vec!["the builds printed different output".into()],
        undecided: Vec::new(),
        sampling: None,
    })
}

#[test]
fn an_undecided_search_is_no_all_clear_and_a_time_without_interval_is_not_exact() {
    let mut r = report();
    let p = &mut r.pinpoint;
    let mut welch = comparison(37.75, 71.25);
    welch.method = ComparisonMethod::WelchT;
    welch.verdict = Verdict::Inconclusive;
    p.chain = vec![Link::new("main".into(), 0, false, 1, welch)];
    p.bottleneck = None;
    p.stop = "undecided".into();
    p.stopped = "main had too few samples".into();
    assert!(p.is_undecided());
    let mut out = Vec::new();
    text(&r, &mut out).unwrap();
    let t = String::from_utf8(out).unwrap();
    assert!(t.contains("+88.7% no interval  n=1"), "{t}");
    assert!(
        !t.contains("exact") && !t.contains("did not get worse"),
        "{t}"
    );
    assert!(
        t.contains("no verdict: whether main got worse is undecided"),
        "{t}"
    );
    let mut out = Vec::new();
    html(&r, &mut out).unwrap();
    let page = String::from_utf8(out).unwrap();
    assert!(!page.contains("did not get worse"), "{page}");
}

#[test]
fn text_is_an_indented_chain_with_the_bottleneck_marked() {
    let mut out = Vec::new();
    text(&report(), &mut out).unwrap();
    let t = String::from_utf8(out).unwrap();
    assert!(
        t.contains("\nmain  1,000 -> 1,300 instructions  +30.0% exact  n=3\n"),
        "{t}"
    );
    assert!(
        t.contains("   └─ deep<T>  400 -> 700 instructions  +75.0% exact  n=3  <== bottleneck"),
        "{t}"
    );
    assert!(t.contains("stopped: no call made by deep got worse"), "{t}");
}

#[test]
fn json_has_the_top_level_pinpoint_object_and_html_escapes() {
    let mut out = Vec::new();
    json(&report(), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["pinpoint"]["bottleneck"], "deep<T>");
    assert_eq!(v["pinpoint"]["chain"][1]["previous"], 400.0);
    assert_eq!(v["pinpoint"]["chain"][0]["method"], "exact");
    let mut out = Vec::new();
    html(&report(), &mut out).unwrap();
    let h = String::from_utf8(out).unwrap();
    assert!(h.contains("deep&lt;T&gt;") && !h.contains("deep<T>"), "{h}");
    assert_eq!(h.matches("class=\"bar prev\"").count(), 2);
    let mut out = Vec::new();
    markdown(&report(), &mut out).unwrap();
    let m = String::from_utf8(out).unwrap();
    assert!(
        m.contains("| 1 | **`deep<T>`** (bottleneck) | 400 | 700 | +75.0% | exact | 3 |"),
        "{m}"
    );
}

#[test]
fn text_shows_the_cycle_the_shares_the_note_and_how_many_runs_were_made() {
    let mut r = report();
    let p = &mut r.pinpoint;
    p.repeated = Some(true);
    p.runs = 1;
    p.bottleneck_share_percent = Some(99.5);
    p.chain[1] = p.chain[1].clone().with_context(
        vec!["deep<T>".into(), "deeper".into()],
        Some(0.75),
        Some("more than the call above it: why".into()),
    );
    let mut out = Vec::new();
    text(&r, &mut out).unwrap();
    let t = String::from_utf8(out).unwrap();
    assert!(
        t.contains(
            "runs: one per build: a second run of the previous build repeated its counts exactly"
        ),
        "{t}"
    );
    assert!(
        t.contains("└─ deep<T> (recursive with deeper, counted once)  400 -> 700"),
        "{t}"
    );
    assert!(
        t.contains("n=3  75.0% of the change  <== bottleneck"),
        "{t}"
    );
    assert!(
        t.contains("\n      (more than the call above it: why)\n"),
        "{t}"
    );
    assert!(
        t.contains("bottleneck: deep<T> (99.5% of the change)"),
        "{t}"
    );
    let mut out = Vec::new();
    json(&r, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let link = &v["pinpoint"]["chain"][1];
    assert_eq!(link["cycle"], serde_json::json!(["deep<T>", "deeper"]));
    assert_eq!(link["share_percent"], 75.0);
    assert_eq!(v["pinpoint"]["repeated"], true);
}
