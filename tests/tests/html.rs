//! The HTML report rendered by a real browser (Debian's headless Chromium): the plots
//! exist with a non-zero size and the page logs no console errors.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use sbs_skip::{skip, Need};
use util::sbs;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| which_in_path(name))
}

/// Chromium, or a skip that says how to install it.
fn chromium_or_skip() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        skip!(
            Need::Chromium,
            "no chromium in PATH (apt-get install chromium) to render the HTML report"
        );
    }
    found
}

fn which_in_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

fn headless(browser: &Path, profile: &Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,1600",
    ]);
    cmd.arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// The sizes of the SVGs matching `selector` once Chromium rendered `html`, measured by a
/// probe script added to a copy of the page (the report itself has no scripts), and the
/// console errors it logged.
fn rendered_svg_sizes(
    browser: &Path,
    dir: &Path,
    html: &str,
    selector: &str,
) -> (Vec<[f64; 2]>, Vec<String>) {
    let probe = html.replace(
        "</body>",
        &format!(
            "<script>document.body.setAttribute('data-svg', JSON.stringify([...document.querySelectorAll('{selector}')]\
             .map(s => {{ const b = s.getBoundingClientRect(); return [b.width, b.height]; }})));</script></body>"
        ),
    );
    let probe_path = dir.join("probe.html");
    std::fs::write(&probe_path, probe).unwrap();
    let out = headless(browser, &dir.join("profile"))
        .arg("--dump-dom")
        .arg(format!("file://{}", probe_path.display()))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let attr = dom
        .split("data-svg=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no measurement in the DOM; chromium said:\n{stderr}"))
        .replace("&quot;", "\"");
    let errors = stderr
        .lines()
        .filter(|l| {
            l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("ERR_FILE_NOT_FOUND")
        })
        .map(str::to_string)
        .collect();
    (serde_json::from_str(&attr).unwrap(), errors)
}

#[test]
fn html_report_renders_its_plots_in_chromium() {
    let Some(browser) = chromium_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let run = sbs([
        "--runs",
        "5",
        "--html",
        page.to_str().unwrap(),
        "--",
        fixture!("spin_threads"),
        "1",
        "10000",
    ])
    .success();
    let html = std::fs::read_to_string(&page).unwrap();
    // One figure per timing metric (time.wall, time.cpu, time.user, time.sys, rss.peak):
    // a strip plot, or the number when every run gave the same value (time.sys is often
    // 0 throughout).
    let plots = html.matches("<svg").count();
    let exact = html.matches("<figure class=exact>").count();
    run.check(
        plots + exact == 5 && plots >= 1,
        "one figure per timing metric",
    );

    let (sizes, errors) = rendered_svg_sizes(&browser, dir.path(), &html, "svg");
    assert_eq!(sizes.len(), plots, "{sizes:?}");
    for [w, h] in &sizes {
        assert!(*w > 100.0 && *h > 30.0, "plot too small: {sizes:?}");
    }
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    // And a screenshot of the report itself.
    let shot = dir.path().join("shot.png");
    let status = headless(&browser, &dir.path().join("profile2"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "screenshot of {} bytes",
        png.len()
    );
}

#[test]
fn html_report_draws_a_scan_against_its_parameter() {
    let Some(browser) = chromium_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("scan.html");
    let run = sbs([
        "--runs",
        "2",
        "--warmup",
        "0",
        "--alloc",
        "--html",
        page.to_str().unwrap(),
        "-f",
        "json",
        "-P",
        "n",
        "100",
        "300",
        "-D",
        "100",
        "--",
        fixture!("allocate"),
        "{n}",
        "64",
    ])
    .success();
    let fits = run.json()["scans"][0]["fits"].as_array().unwrap().len();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Growth over n (3 points of"),
        "no scan section"
    );
    assert!(html.contains("alloc.count grows as n: 1.00 per unit of n"));
    let (sizes, errors) = rendered_svg_sizes(&browser, dir.path(), &html, "figure.scan svg");
    assert_eq!(sizes.len(), fits, "one plot per fitted metric: {sizes:?}");
    for [w, h] in &sizes {
        assert!(*w > 100.0 && *h > 30.0, "plot too small: {sizes:?}");
    }
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
